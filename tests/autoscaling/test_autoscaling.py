"""Each pool scales on its own: a prefill-heavy load grows prefill, not decode, and
prefill shrinks back when the load stops.

Runs in its own pytest session (its own Ray cluster, `make test` runs it after the main
suite): the apps of tests/integration would not leave memory for a third engine.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx
import pytest
from ray import serve

from load_tests.local_app import LocalApp

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
        # Each request spends one short step on decode: its queue stays below this.
        "autoscaling_config": {**FAST_SCALING, "target_ongoing_requests": 16},
        "ray_actor_options": {"num_cpus": 0.5},
    },
    "router": {"local_prefill_below_tokens": 0},
}


def running(deployment: str) -> int:
    states: Any = serve.status().applications["splitserve"].deployments[deployment].replica_states
    return int(states.get("RUNNING", 0))


async def prefill_heavy_load(url: str, stop: asyncio.Event, clients: int = 8) -> int:
    """Long prompts, one output token each, until ``stop``; returns requests served."""
    served = 0

    async def client(seed: int) -> None:
        nonlocal served
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=120) as http:
            while not stop.is_set():
                prompt = [rng.randrange(3, 1000) for _ in range(900)]
                body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
                response = await http.post(f"{url}/v1/completions", json=body)
                assert response.status_code == 200, response.text
                served += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return served


async def test_prefill_heavy_load_scales_prefill_only():
    with LocalApp("serve_configs/default.yaml", num_cpus=2, overrides=OVERRIDES) as app:
        assert (running("Prefill"), running("Decode")) == (1, 1)
        stop = asyncio.Event()
        load = asyncio.create_task(prefill_heavy_load(app.url, stop))
        decode_peak = 1
        deadline = time.monotonic() + 180
        while running("Prefill") < 2 and time.monotonic() < deadline and not load.done():
            decode_peak = max(decode_peak, running("Decode"))
            await asyncio.sleep(1)
        prefill_peak = running("Prefill")
        decode_peak = max(decode_peak, running("Decode"))
        stop.set()
        served = await load
        assert served > 0
        assert prefill_peak == 2, "prefill should scale up under long prompts"
        assert decode_peak == 1, "decode should not scale: its queue stayed short"

        deadline = time.monotonic() + 120
        while running("Prefill") > 1 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(1)
        assert running("Prefill") == 1, "prefill should shrink back when the load stops"
        assert running("Decode") == 1
