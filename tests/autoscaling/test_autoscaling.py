"""Each pool scales on its own: a prefill-heavy load grows prefill, not decode; a
decode-heavy load grows decode, not prefill; each shrinks back when its load stops.
Once with Serve's default policy (ongoing requests per replica), once with the SLO
policy of serve_configs/autoscaling.yaml (TTFT drives prefill, TPOT drives decode), whose
app takes an API key: a flood of requests without it must not move either pool.

Runs in its own pytest session (its own Ray cluster; `make test` runs it first): the apps
of tests/integration would not leave memory for a third engine.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray
import yaml
from ray import serve

from load_tests.systems.local_app import LocalApp

pytestmark = pytest.mark.integration

FAST_SCALING = {
    "initial_replicas": 1,
    "min_replicas": 1,
    "max_replicas": 2,
    "upscale_delay_s": 1.0,
    "downscale_delay_s": 5.0,
    "look_back_period_s": 2.0,
}
OVERRIDES: dict[str, Any] = {
    "prefill": {
        "num_replicas": None,
        "autoscaling_config": {**FAST_SCALING, "target_ongoing_requests": 1},
        "ray_actor_options": {"num_cpus": 0.5},
    },
    "decode": {
        "num_replicas": None,
        # Prefill-heavy requests spend one short step on decode: its queue stays below this.
        "autoscaling_config": {**FAST_SCALING, "target_ongoing_requests": 6},
        "ray_actor_options": {"num_cpus": 0.5},
    },
    # Short prompts (the decode-heavy load) are prefilled on decode; long ones remotely.
    "router": {"local_prefill_below_tokens": 64},
    # The load must pile up to scale the pools: no shedding (tests/integration covers it).
    "ingress": {"admission": {"ttft_budget_s": 3600}},
}


API_KEY = "autoscaling-test-key-0123"


def running(deployment: str) -> int:
    states: Any = serve.status().applications["splitserve"].deployments[deployment].replica_states
    return int(states.get("RUNNING", 0))


async def load(
    url: str,
    stop: asyncio.Event,
    clients: int,
    prompt_len: int,
    max_tokens: int,
    key: str | None = None,
) -> int:
    """Closed-loop clients until ``stop``; returns requests served."""
    served = 0
    headers = {"authorization": f"Bearer {key}"} if key else {}

    async def client(seed: int) -> None:
        nonlocal served
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=120, headers=headers) as http:
            while not stop.is_set():
                prompt = [rng.randrange(3, 1000) for _ in range(prompt_len)]
                body = {
                    "prompt": prompt,
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "ignore_eos": True,
                }
                response = await http.post(f"{url}/v1/completions", json=body)
                assert response.status_code == 200, response.text
                served += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return served


async def scale_under(
    url: str,
    busy: str,
    idle: str,
    clients: int,
    prompt_len: int,
    max_tokens: int,
    key: str | None = None,
) -> None:
    """Load that piles up on ``busy``: it must grow to 2 replicas, ``idle`` must stay at
    1, and ``busy`` must shrink back to 1 once the load stops."""
    stop = asyncio.Event()
    task = asyncio.create_task(load(url, stop, clients, prompt_len, max_tokens, key))
    idle_peak = 1
    deadline = time.monotonic() + 180
    while running(busy) < 2 and time.monotonic() < deadline and not task.done():
        idle_peak = max(idle_peak, running(idle))
        await asyncio.sleep(1)
    busy_peak = running(busy)
    idle_peak = max(idle_peak, running(idle))
    stop.set()
    assert await task > 0
    assert busy_peak == 2, f"{busy} should scale up under this load"
    assert idle_peak == 1, f"{idle} should not scale: its queue stayed short"

    deadline = time.monotonic() + 120
    while running(busy) > 1 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(1)
    assert running(busy) == 1, f"{busy} should shrink back when the load stops"
    assert running(idle) == 1


async def test_each_pool_scales_on_its_own_load():
    with LocalApp("serve_configs/default.yaml", num_cpus=2, overrides=OVERRIDES) as app:
        assert (running("Prefill"), running("Decode")) == (1, 1)
        # Long prompts, one output token: the work is prefill.
        await scale_under(app.url, "Prefill", "Decode", clients=8, prompt_len=900, max_tokens=1)
        # Short prompts (prefilled on decode), long outputs: the work is decode.
        await scale_under(app.url, "Decode", "Prefill", clients=16, prompt_len=20, max_tokens=200)


def slo_config(tmp_path) -> str:
    """serve_configs/autoscaling.yaml with targets this load misses on one replica
    (TTFT 150 ms for 900-token prompts from 8 clients, TPOT 5 ms for 16 streams) and
    quick reactions; the policy's `slo` stays the app's."""
    document = yaml.safe_load(Path("serve_configs/autoscaling.yaml").read_text())
    (application,) = document["applications"]
    args = application["args"]
    slo = {**args["slo"], "ttft_ms": 150, "tpot_ms": 5}
    args["slo"] = slo
    for pool in ("prefill", "decode"):
        args[pool]["autoscaling_config"] = {
            **args[pool]["autoscaling_config"],
            "look_back_period_s": 2,
        }
    args["router"] = OVERRIDES["router"]
    args["ingress"] = {**args["ingress"], **OVERRIDES["ingress"], "api_key": API_KEY}
    kwargs = application["autoscaling_policy"]["policy_kwargs"]
    kwargs.update(slo=slo, upscale_cooldown_s=1, downscale_delay_s=5)
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


async def unauthenticated_flood(url: str, seconds: float, clients: int = 32) -> dict[int, int]:
    """Closed-loop clients without the API key for ``seconds``, each body the
    prefill-heavy load's (900 prompt tokens, one output token): statuses counted. As
    demand it would need several prefill replicas (one serves a few such requests per
    second); unauthenticated, it must be none."""
    statuses: dict[int, int] = {}
    until = time.monotonic() + seconds

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=60) as http:
            while time.monotonic() < until:
                prompt = [rng.randrange(3, 1000) for _ in range(900)]
                body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
                r = await http.post(f"{url}/v1/completions", json=body)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return statuses


async def stays_put_under_flood(url: str, seconds: float) -> None:
    """An unauthenticated flood is no demand, and both pools stay at 1 replica through
    it and the policy's reaction time after it, with no change logged. Beside the flood,
    one client with the key sends short requests one at a time (20 prompt tokens,
    prefilled on decode, one output token: far inside the targets): the ingress's demand
    figures (what Serve hands the SLO policy's model) must count that client's arrivals
    and not the flood's."""
    stop = asyncio.Event()
    trickle = asyncio.create_task(load(url, stop, 1, 20, 1, API_KEY))
    flood = asyncio.create_task(unauthenticated_flood(url, seconds))
    ingress: Any = serve.get_deployment_handle("Ingress", app_name="splitserve")
    peaks = {"Prefill": 1, "Decode": 1}
    figures: dict[str, float] = {}
    started = time.monotonic()
    deadline = started + seconds + 10  # look-back 2 s, cooldown 1 s, export lag
    while time.monotonic() < deadline:
        for pool in peaks:
            peaks[pool] = max(peaks[pool], running(pool))
        if not figures and time.monotonic() > started + seconds - 2:
            figures = await ingress.record_autoscaling_stats.remote()  # 10 s of flood
        await asyncio.sleep(1)
    stop.set()
    served = await trickle
    statuses = await flood
    flood_per_s = sum(statuses.values()) / seconds
    print(f"unauthenticated flood, {seconds:.0f} s: {statuses}; trickle: {served} served; "
          f"demand seen: {figures.get('arrivals_per_s')} arrivals/s")  # fmt: skip
    assert set(statuses) == {401}, statuses
    assert flood_per_s > 50, "the flood was too thin to test anything"
    assert 0 < figures["arrivals_per_s"] <= served / 10 + 1, (figures, served)
    assert figures["arrivals_per_s"] < flood_per_s / 10, (figures, flood_per_s)
    assert peaks == {"Prefill": 1, "Decode": 1}, f"the flood moved the pools: {peaks}"
    changes = re.findall(r"SLO autoscaler: \w+ \d+ -> \d+ replicas: .*", controller_log())
    assert changes == [], changes


def decisions_counted(page: str) -> set[tuple[str, str]]:
    """(pool, direction) of every ``splitserve_autoscaling_decisions_total`` series."""
    found = set()
    for line in page.splitlines():
        if line.startswith("splitserve_autoscaling_decisions_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            found.add((labels["pool"], labels["direction"]))
    return found


def controller_log() -> str:
    node: Any = ray._private.worker._global_node  # type: ignore[attr-defined]
    logs = Path(node.get_session_dir_path()) / "logs" / "serve"
    return "".join(p.read_text(errors="replace") for p in logs.glob("controller_*.log"))


async def test_the_slo_policy_grows_each_pool_on_its_own_signal_or_the_model(tmp_path):
    """Prefill grows on its TTFT rules, decode on TPOT or on the planner's model, each
    back down when calm. The policy holds each pool at least at the model's split of the
    arriving load, so under this load the model may grow decode before TPOT's window
    runs over: the log must say which. That TPOT alone grows decode (and prefill load
    does not) is tests/unit/test_slo_policy.py's
    test_decode_grows_on_tpot_and_not_on_prefill_load."""
    with LocalApp(slo_config(tmp_path), num_cpus=2) as app:
        assert (running("Prefill"), running("Decode")) == (1, 1)
        await stays_put_under_flood(app.url, seconds=20)
        await scale_under(app.url, "Prefill", "Decode", 8, 900, 1, key=API_KEY)
        await scale_under(app.url, "Decode", "Prefill", 16, 20, 200, key=API_KEY)
        log = controller_log()
        # Ray exports a process's metrics every 10 s: the last change may take that long.
        async with httpx.AsyncClient(timeout=60) as http:
            deadline = time.monotonic() + 60
            while True:
                counted = decisions_counted((await http.get(f"{app.url}/metrics")).text)
                if len(counted) == 4 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(2)
    # Every change is logged with its reason.
    assert "SLO autoscaler: Prefill 1 -> 2 replicas: " in log
    assert "over budget" in log or "load needs" in log or "arriving need" in log
    grown = re.search(
        r"SLO autoscaler: Decode 1 -> 2 replicas: (TPOT [\d.]+ ms over|the model)", log
    )
    assert grown, log
    print(f"decode grew on: {grown.group(1)}")
    # The planner's model answered in the controller, from the demand the ingress
    # reported (its arrivals and their mix).
    assert re.search(r"SLO autoscaler: the model: [\d.]+ req/s arriving \(", log), log
    assert "SLO autoscaler: Prefill 2 -> 1 replicas: 1 would meet the TTFT budget" in log
    # ... and counted, on the API port's /metrics too.
    assert set(counted) == {(p, d) for p in ("Prefill", "Decode") for d in ("up", "down")}, counted
