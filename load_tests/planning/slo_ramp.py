"""The SLO autoscaling policy against Serve's default policy on one load ramp
(docs/autoscaling.md).

    scripts/loopback-netns .venv/bin/python -m load_tests.planning.slo_ramp

1. **Capacity.** The default config (one prefill and one decode replica, fixed) serves
   the workload from ``--clients`` closed-loop clients: its completed requests per second
   are one replica pair's capacity C.
2. **The ramp**, once per policy, each in a fresh cluster: Poisson arrivals at 0.5 C for
   ``--low-s``, 2 C for ``--high-s``, 0.5 C for ``--low-s``, against
   ``serve_configs/autoscaling.yaml`` (``slo``: its SLO policy) and against the same pools
   and bounds under Serve's default policy (``default``: ``target_ongoing_requests`` 2,
   Serve's delays set to the SLO policy's cool-down and downscale delay). The replicas of
   each pool are sampled every 2 s.

The workload mixes long prompts (prefilled remotely, few output tokens) with short
prompts and long outputs (prefilled on decode). The SLO is the config's ``slo:`` block.
Reports per policy: attainment (both targets met; failures and 503s count as misses)
overall and per 30 s of arrivals, TTFT/TPOT percentiles, replica-seconds per pool; writes
JSON to ``--out`` and a plot to ``--plot``. Only loopback traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.config import SloConfig, serve_file_policy
from app.planning.goodput import SLO, attainment
from app.planning.scaling_sim import ramp_arrival_times
from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import closed_loop, one_request
from load_tests.client.workloads import Request
from load_tests.systems.local_app import LocalApp
from load_tests.systems.run_conditions import machine

CONFIG = "serve_configs/autoscaling.yaml"
POOLS = ("Prefill", "Decode")
BIN_S = 30.0


# The ramp's mix: long prompts (prefilled remotely, few output tokens), and short prompts
# with long outputs (prefilled on decode). load_tests.planning.simulated_ramp replays it.
LONG, SHORT, LONG_SHARE = (1536, 16), (128, 128), 0.3


def ramp_lengths(rng: random.Random) -> tuple[int, int]:
    """One request's (prompt, output) tokens from the ramp's mix."""
    return LONG if rng.random() < LONG_SHARE else SHORT


def ramp_workload(rng: random.Random, count: int) -> list[Request]:
    requests: list[Request] = []
    for _ in range(count):
        prompt_len, output_len = ramp_lengths(rng)
        requests.append(([rng.randrange(3, 1000) for _ in range(prompt_len)], output_len))
    return requests


def default_policy_config(path: str, out: Path) -> Path:
    """``path`` with Serve's default policy in place of its application-level policy, on
    the same pools and bounds, Serve's delays set to the policy's cool-downs."""
    document = yaml.safe_load(Path(path).read_text())
    (application,) = document["applications"]
    kwargs = application.pop("autoscaling_policy")["policy_kwargs"]
    for pool in ("prefill", "decode"):
        scaling = dict(application["args"][pool]["autoscaling_config"])
        scaling.update(
            target_ongoing_requests=2,
            upscale_delay_s=kwargs.get("upscale_cooldown_s", 15),
            downscale_delay_s=kwargs.get("downscale_delay_s", 60),
        )
        application["args"][pool]["autoscaling_config"] = scaling
    out.write_text(yaml.safe_dump(document))
    return out


def measure_capacity(args: argparse.Namespace) -> float:
    requests = ramp_workload(random.Random(args.seed), args.capacity_requests)
    with LocalApp("serve_configs/default.yaml", num_cpus=2) as app:

        async def run() -> tuple[list[StreamTiming], list[str]]:
            async with httpx.AsyncClient(timeout=600) as http:
                await one_request(http, app.url, None, requests[0][0], 4)  # warm the path
                return await closed_loop(http, app.url, None, requests, args.clients)

        started = time.perf_counter()
        timings, failures = asyncio.run(run())
        wall = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"capacity run failed {len(failures)} requests: {failures[:3]}")
    return len(timings) / wall


class ReplicaSampler(threading.Thread):
    """Every ``interval_s``: (seconds since start, running replicas per pool)."""

    def __init__(self, app_name: str, interval_s: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.app_name = app_name
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.stop = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        from ray import serve

        while not self.stop.is_set():
            deployments = serve.status().applications[self.app_name].deployments
            states: dict[str, Any] = {p: deployments[p].replica_states for p in POOLS}
            counts = {pool: int(states[pool].get("RUNNING", 0)) for pool in POOLS}
            self.samples.append((time.monotonic() - self.started_at, counts))
            self.stop.wait(self.interval_s)

    def replica_seconds(self) -> dict[str, float]:
        totals = dict.fromkeys(POOLS, 0.0)
        for (t0, counts), (t1, _) in zip(self.samples, self.samples[1:], strict=False):
            for pool in POOLS:
                totals[pool] += counts[pool] * (t1 - t0)
        return totals


async def send_ramp(
    url: str, arrivals: list[float], requests: list[Request]
) -> list[tuple[float, StreamTiming | str]]:
    """Send request i at ``arrivals[i]``; (send time, timing or failure) per request."""
    results: list[tuple[float, StreamTiming | str]] = []
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def send(at: float, request: Request) -> None:
            try:
                results.append((at, await one_request(http, url, None, *request)))
            except (RuntimeError, httpx.HTTPError) as exc:
                results.append((at, f"{type(exc).__name__}: {exc}"[:200]))

        tasks = []
        started = time.monotonic()
        for at, request in zip(arrivals, requests, strict=True):
            await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
            tasks.append(asyncio.create_task(send(at, request)))
        await asyncio.gather(*tasks)
    return results


def run_policy(
    name: str, config: Path, phases: list[tuple[float, float]], slo: SLO, args: argparse.Namespace
) -> dict[str, Any]:
    rng = random.Random(args.seed + 1)
    arrivals = ramp_arrival_times(rng, phases)
    requests = ramp_workload(random.Random(args.seed + 2), len(arrivals))
    with LocalApp(config, num_cpus=2) as app:
        sampler = ReplicaSampler(app.name)
        sampler.start()
        results = asyncio.run(send_ramp(app.url, arrivals, requests))
        # The pools' way back down after the ramp's end counts too.
        time.sleep(args.tail_s)
        sampler.stop.set()
        sampler.join()
    timings = [r for _, r in results if isinstance(r, StreamTiming)]
    failures = [r for _, r in results if isinstance(r, str)]
    bins: dict[int, list[bool]] = {}
    for at, result in results:
        bins.setdefault(int(at // BIN_S), []).append(
            isinstance(result, StreamTiming) and slo.met_by(result)
        )
    return {
        "policy": name,
        "requests": len(results),
        "failed": len(failures),
        "failures": failures[:5],
        "attainment": attainment(timings, slo, failed=len(failures)),
        "attainment_by_bin": [
            {"from_s": b * BIN_S, "requests": len(v), "attainment": sum(v) / len(v)}
            for b, v in sorted(bins.items())
        ],
        "ttft_ms": summarize([t.ttft for t in timings], 1000),
        "tpot_ms": summarize([t.tpot for t in timings if t.output_tokens > 1], 1000),
        "replica_seconds": sampler.replica_seconds(),
        "replicas": [{"t_s": t, **counts} for t, counts in sampler.samples],
    }


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for run in result["policies"]:
        xs = [b["from_s"] + BIN_S / 2 for b in run["attainment_by_bin"]]
        top.plot(
            xs, [b["attainment"] for b in run["attainment_by_bin"]], marker="o", label=run["policy"]
        )
        for pool, style in zip(POOLS, ("-", "--"), strict=True):
            bottom.step(
                [s["t_s"] for s in run["replicas"]],
                [s[pool] for s in run["replicas"]],
                style,
                where="post",
                label=f"{run['policy']}: {pool}",
            )
    target = result["conditions"]["slo"]["attainment"]
    top.axhline(target, color="grey", linewidth=0.8)
    top.set_ylabel("SLO attainment (30 s bins)")
    top.set_ylim(0, 1.05)
    top.legend()
    bottom.set_ylabel("replicas running")
    bottom.set_xlabel("seconds from the ramp's start")
    bottom.legend(fontsize="small")
    edges = [0.0]
    for seconds, _ in result["conditions"]["phases"]:
        edges.append(edges[-1] + seconds)
    for edge in edges[1:-1]:
        top.axvline(edge, color="grey", linestyle=":")
        bottom.axvline(edge, color="grey", linestyle=":")
    fig.suptitle("Load ramp 0.5x -> 2x -> 0.5x of one pair's capacity")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--clients", type=int, default=16, help="closed-loop, for capacity")
    parser.add_argument("--capacity-requests", type=int, default=200)
    parser.add_argument("--capacity", type=float, help="req/s; skips the capacity run")
    parser.add_argument("--low-s", type=float, default=150.0)
    parser.add_argument("--high-s", type=float, default=240.0)
    parser.add_argument("--tail-s", type=float, default=60.0, help="watch after the ramp")
    parser.add_argument(
        "--policies", nargs="+", default=["slo", "default"], choices=["slo", "default"]
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/slo_ramp.json")
    parser.add_argument("--plot", default="load_tests/results/slo_ramp.png")
    args = parser.parse_args()
    if serve_file_policy(args.config) is None:
        parser.error(f"{args.config} names no application-level autoscaling_policy")
    slo_config = SloConfig.from_serve_file(args.config)
    slo = SLO(slo_config.ttft_s, slo_config.tpot_s)
    capacity = args.capacity or measure_capacity(args)
    phases = [
        (args.low_s, 0.5 * capacity),
        (args.high_s, 2 * capacity),
        (args.low_s, 0.5 * capacity),
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        configs = {
            "slo": Path(args.config),
            "default": default_policy_config(args.config, Path(tmp) / "default.yaml"),
        }
        result: dict[str, Any] = {
            "conditions": {
                **vars(args),
                "capacity_req_per_s": capacity,
                "phases": phases,
                "slo": slo_config.model_dump(),
                "machine": machine(),
            },
            "policies": [run_policy(p, configs[p], phases, slo, args) for p in args.policies],
        }
    out.write_text(json.dumps(result, indent=2))
    plot(result, args.plot)
    for run in result["policies"]:
        print(
            f"{run['policy']:>8}: attainment {run['attainment']:.1%} of {run['requests']} "
            f"(failed {run['failed']}), replica-seconds {run['replica_seconds']}"
        )


if __name__ == "__main__":
    main()
