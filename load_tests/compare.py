"""Side by side on one machine: splitserve disaggregated, splitserve colocated, and vLLM's
own OpenAI server, with the same workloads, one system at a time.

    scripts/loopback-netns .venv/bin/python -m load_tests.compare   (or: make bench-compare)

Workloads: (1) concurrency 1, 128-in/128-out: TTFT and TPOT with no contention;
(2) the interference case: Poisson arrivals of the ``mixed`` workload (80% 128-in/128-out
streams, 20% 768-in/8-out long prompts): TTFT p99 and ITL p99 of the *short* requests,
i.e. how much long prompts stall everyone's stream. Writes JSON and prints a table.

Cores: splitserve disaggregated runs prefill on core 0 and decode on core 1; the colocated
systems run their engine on core 0, leaving core 1 to the frontend (as DESIGN.md measured
fastest for vLLM). Ray Serve LLM's PD app is not in this comparison yet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from app.model_source import resolve_model
from load_tests.loadgen import run_at_rate
from load_tests.local_app import LocalApp
from load_tests.stats import StreamTiming, summarize
from load_tests.stream_bench import one_request
from load_tests.workloads import fixed, mixed


@contextmanager
def vllm_server(port: int = 8011) -> Iterator[str]:
    """vLLM's OpenAI server on the builtin model, engine bound to core 0."""
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "0",
        "VLLM_NO_USAGE_STATS": "1",
    }
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", resolve_model("builtin:tiny-llama"), "--served-model-name", "tiny-llama",
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024",
        "--enforce-eager", "--enable-prefix-caching",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise RuntimeError("vLLM's server exited during start-up")
            time.sleep(1)
        else:
            raise RuntimeError("vLLM's server did not become healthy in 180 s")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def splitserve(config: str) -> Iterator[str]:
    with LocalApp(config) as app:
        yield app.url


async def concurrency_one(url: str, count: int, seed: int) -> list[StreamTiming]:
    requests = fixed(random.Random(seed), count, input_len=128, output_len=128)
    async with httpx.AsyncClient(timeout=300) as client:
        await one_request(client, url, "tiny-llama", requests[0][0], 4)  # warm-up
        return [await one_request(client, url, "tiny-llama", p, m) for p, m in requests]


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    c1 = asyncio.run(concurrency_one(url, args.c1_requests, args.seed))
    requests = mixed(random.Random(args.seed), args.mixed_requests)
    timings, failures, wall = asyncio.run(
        run_at_rate(url, requests, args.rate, args.seed, progress=False)
    )
    short = [t for t in timings if t.prompt_tokens <= 128]
    return {
        "c1_ttft_ms": summarize([t.ttft for t in c1], 1000),
        "c1_tpot_ms": summarize([t.tpot for t in c1], 1000),
        "mixed_failed": len(failures),
        "mixed_short_ttft_ms": summarize([t.ttft for t in short], 1000),
        "mixed_short_itl_ms": summarize([g for t in short for g in t.chunk_gaps], 1000),
        "mixed_short_tpot_ms": summarize([t.tpot for t in short], 1000),
        "mixed_output_tok_per_s": sum(t.output_tokens for t in timings) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--c1-requests", type=int, default=30)
    parser.add_argument("--mixed-requests", type=int, default=120)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/compare.json")
    args = parser.parse_args()
    systems: dict[str, Callable[[], AbstractContextManager[str]]] = {
        "splitserve disaggregated": lambda: splitserve("serve_configs/default.yaml"),
        "splitserve colocated": lambda: splitserve("serve_configs/colocated.yaml"),
        "vLLM OpenAI server": vllm_server,
    }
    rows = {}
    for name, start in systems.items():
        with start() as url:
            rows[name] = measure(url, args)
        print(name, json.dumps(rows[name]), flush=True)
    result = {"conditions": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        f"{'system':<26} {'c1 TTFT p50':>12} {'c1 TPOT p50':>12} {'short TTFT p99':>15}"
        f" {'short ITL p99':>14} {'short TPOT p50':>15}"
    )
    for name, row in rows.items():
        print(
            f"{name:<26} {row['c1_ttft_ms']['p50']:>12.1f} {row['c1_tpot_ms']['p50']:>12.2f}"
            f" {row['mixed_short_ttft_ms']['p99']:>15.1f} {row['mixed_short_itl_ms']['p99']:>14.1f}"
            f" {row['mixed_short_tpot_ms']['p50']:>15.2f}"
        )


if __name__ == "__main__":
    main()
