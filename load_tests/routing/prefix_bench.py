"""Prefix-heavy workload: the prefix-affinity router vs Serve's default routing, side by side.

    make bench-prefix   (scripts/loopback-netns .venv/bin/python -m load_tests.routing.prefix_bench)

For each routing policy the default config is started with two prefill replicas (half a
core each, both on core 0; decode on core 1), then the same workload runs: ``--systems``
shared system prompts x ``--questions`` questions each, shuffled, streamed at
``--concurrency``. Reports the prefill engines' prefix-cache hit rate (prompt tokens found
in the cache / prompt tokens, from each response's ``splitserve.prefill_cached_tokens``)
and client-side TTFT p50/p95/p99. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path
from typing import Any

import httpx

from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import closed_loop, one_request
from load_tests.systems.local_app import LocalApp

POLICIES = ("prefix_affinity", "serve_default")


def workload(systems: int, questions: int, system_len: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    heads = [[rng.randrange(3, 1000) for _ in range(system_len)] for _ in range(systems)]
    prompts = [
        head + [rng.randrange(3, 1000) for _ in range(rng.randint(16, 48))]
        for head in heads
        for _ in range(questions)
    ]
    rng.shuffle(prompts)
    return prompts


async def drive(url: str, prompts: list[list[int]], concurrency: int) -> list[StreamTiming]:
    async with httpx.AsyncClient(timeout=300) as client:
        # Warm every replica up (NIXL handshakes, first-step costs) on unrelated prompts.
        rng = random.Random(-1)
        for _ in range(4):
            await one_request(client, url, None, [rng.randrange(3, 1000) for _ in range(200)], 2)

        results, failures = await closed_loop(
            client, url, None, [(p, 8) for p in prompts], concurrency
        )
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, first: {failures[0]}")
    return results


def run_policy(policy: str, prompts: list[list[int]], concurrency: int) -> dict[str, Any]:
    overrides = {
        "prefill": {"num_replicas": 2, "ray_actor_options": {"num_cpus": 0.5}},
        "decode": {"ray_actor_options": {"num_cpus": 1}},
        "router": {"prefill_policy": policy, "local_prefill_below_tokens": 0},
    }
    with LocalApp("serve_configs/default.yaml", overrides=overrides) as app:
        results = asyncio.run(drive(app.url, prompts, concurrency))
    served = [r.server for r in results if r.server]
    prompt_tokens = sum(len(p) for p in prompts)
    cached = sum(int(s.get("prefill_cached_tokens") or 0) for s in served)
    engines: dict[str, int] = {}
    for s in served:
        engines[s["prefill_engine"]] = engines.get(s["prefill_engine"], 0) + 1
    return {
        "policy": policy,
        "requests": len(results),
        "prefill_hit_rate": cached / prompt_tokens if prompt_tokens else 0.0,
        "requests_per_prefill_replica": sorted(engines.values()),
        "ttft_ms": summarize([r.ttft for r in results], 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", type=int, default=8)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--system-len", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/prefix.json")
    args = parser.parse_args()
    prompts = workload(args.systems, args.questions, args.system_len, args.seed)
    rows = [run_policy(policy, prompts, args.concurrency) for policy in POLICIES]
    result = {"conditions": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
