"""What the front end costs: c=1 TTFT, c=16 tokens/s and the ingress's CPU per streamed token.

    scripts/loopback-netns python -m load_tests.frontend_cost [--config serve_configs/default.yaml]

Starts the app (Ray on loopback), warms it up, streams ``--c1-requests`` at concurrency 1
and ``--c16-requests`` at concurrency 16 (128 prompt tokens, 128 output tokens each), and
reads the ingress replica's CPU time (user + system, from /proc) around the c=16 run.
Prints JSON with the run conditions. Run two versions back to back to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import time
from typing import Any

import httpx
import psutil

from app.host import cpu_model
from load_tests.client.stats import summarize
from load_tests.client.stream_bench import closed_loop, one_request
from load_tests.client.workloads import fixed
from load_tests.systems.local_app import LocalApp


def ingress_process(app_name: str) -> psutil.Process:
    """The ingress replica's process (Ray names it ``ray::ServeReplica:<app>:Ingress``)."""
    for process in psutil.process_iter(["cmdline"]):
        if any(
            f"ServeReplica:{app_name}:Ingress" in part for part in process.info["cmdline"] or ()
        ):
            return process
    raise RuntimeError("no ingress replica process found")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def measure(url: str, c1: int, c16: int, ingress: psutil.Process) -> dict[str, Any]:
    rng = random.Random(0)
    async with httpx.AsyncClient(timeout=300) as client:
        for _ in range(4):
            await one_request(client, url, "tiny-llama", list(range(10, 138)), 8)
        timings, failures = await closed_loop(
            client, url, "tiny-llama", fixed(rng, c1, 128, 128), 1
        )
        ttft = summarize([t.ttft for t in timings], 1000)
        tpot = summarize([t.tpot for t in timings], 1000)
        cpu_before = cpu_seconds(ingress)
        started = time.perf_counter()
        timings16, failures16 = await closed_loop(
            client, url, "tiny-llama", fixed(rng, c16, 128, 128), 16
        )
        wall = time.perf_counter() - started
        cpu = cpu_seconds(ingress) - cpu_before
    tokens = sum(t.output_tokens for t in timings16)
    return {
        "c1_ttft_p50_ms": round(ttft["p50"], 2),
        "c1_ttft_p99_ms": round(ttft["p99"], 2),
        "c1_tpot_p50_ms": round(tpot["p50"], 3),
        "c16_tokens_per_s": round(tokens / wall, 1),
        "c16_ingress_cpu_s": round(cpu, 3),
        "c16_ingress_cpu_ms_per_token": round(1000 * cpu / max(tokens, 1), 4),
        "failures": len(failures) + len(failures16),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--c1-requests", type=int, default=30)
    parser.add_argument("--c16-requests", type=int, default=96)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    overrides = {"model": {"max_model_len": 2048}}
    with LocalApp(args.config, overrides=overrides) as app:
        result = asyncio.run(
            measure(app.url, args.c1_requests, args.c16_requests, ingress_process(app.name))
        )
    result["conditions"] = {
        "label": args.label,
        "config": args.config,
        "cpu": cpu_model(),
        "cores": psutil.cpu_count(),
        "python": platform.python_version(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
