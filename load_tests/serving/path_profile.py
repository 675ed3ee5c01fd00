"""Where a request's time and an idle app's CPU go: start-up, idle CPU, RSS, per-stage TTFT.

    scripts/loopback-netns .venv/bin/python -m load_tests.serving.path_profile \
        [--config serve_configs/default.yaml] [--idle-s 20] [--requests 30]

Starts the app from ``--config`` in its own Ray cluster on loopback and reports:
- start-up: seconds from ``ray.init`` until the app answers a completion;
- idle CPU: after a warm-up request, each process's CPU over ``--idle-s`` seconds of no
  traffic, in % of one core, grouped by role (engine core, replica, proxy, raylet, GCS...);
- RSS: each process's resident memory, grouped the same way, and the total;
- a concurrency-1 run (128 in / 128 out): client TTFT and TPOT with the server's own
  breakdown from the response's ``splitserve`` field (prefill, KV fetch, first decode
  step), and what is left over: ingress, routing and the Ray hops.
Writes JSON to ``--out`` (docs/performance.md quotes it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import one_request
from load_tests.systems.local_app import LocalApp
from load_tests.systems.process_usage import cpu_by_group, memory_by_group


async def concurrency_one(url: str, count: int, seed: int) -> list[StreamTiming]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, 1000) for _ in range(128)] for _ in range(count + 1)]
    async with httpx.AsyncClient(timeout=300) as client:
        await one_request(client, url, None, prompts.pop(), 4)  # warm-up
        return [await one_request(client, url, None, p, 128) for p in prompts]


def breakdown(timings: list[StreamTiming]) -> dict[str, dict[str, float]]:
    """Client TTFT split into the server's stages, p50/p95/p99 in ms."""
    servers = [t.server or {} for t in timings]
    stages: dict[str, list[float]] = defaultdict(list)
    for timing, server in zip(timings, servers, strict=True):
        stages["client_ttft"].append(timing.ttft * 1000)
        stages["client_tpot"].append(timing.tpot * 1000)
        for key in ("prefill_ms", "kv_fetch_ms", "decode_first_token_ms", "ttft_ms"):
            if key in server:
                stages[key.removesuffix("_ms")].append(float(server[key]))
        if "ttft_ms" in server:
            stages["outside_orchestrator"].append(timing.ttft * 1000 - server["ttft_ms"])
    return {name: summarize(values) for name, values in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument(
        "--remote-prefill",
        action="store_true",
        help="prefill every prompt on the prefill pool (shows the transfer's share)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/path_profile.json")
    args = parser.parse_args()
    started = time.perf_counter()
    overrides = {"router": {"local_prefill_below_tokens": 0}} if args.remote_prefill else {}
    with LocalApp(args.config, overrides=overrides) as app:
        asyncio.run(concurrency_one(app.url, 0, args.seed))
        startup_s = time.perf_counter() - started
        time.sleep(3)  # let the warm-up's stragglers (metrics flushes) settle
        idle = cpu_by_group(args.idle_s)
        rss = memory_by_group("rss")
        pss = memory_by_group("pss")
        timings = asyncio.run(concurrency_one(app.url, args.requests, args.seed))
        result: dict[str, Any] = {
            "conditions": {
                **vars(args),
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            "startup_s": round(startup_s, 1),
            "idle_cpu_pct_of_one_core": {k: round(v, 1) for k, v in idle.items()},
            "idle_cpu_total_pct": round(sum(idle.values()), 1),
            "rss_mib": {k: round(v) for k, v in rss.items()},
            "rss_total_mib": round(sum(rss.values())),
            "pss_mib": {k: round(v) for k, v in pss.items()},
            "pss_total_mib": round(sum(pss.values())),
            "c1": breakdown(timings),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
