"""Open-loop load generator (Poisson arrivals) with SLO attainment and goodput.

    python -m load_tests.client.loadgen --url http://127.0.0.1:8100 --workload mixed --rate 4 \
        --requests 200 --slo-ttft-ms 500 --slo-tpot-ms 50 [--goodput]

Sends requests from ``--workload`` at exponentially distributed intervals (mean
1/``--rate``), each an SSE completion read until the server closes the stream, and reports
client-side TTFT, TPOT (per token), ITL (between content events) and end-to-end latency at
p50/p95/p99, plus the share of requests meeting both SLO bounds. ``--goodput`` sweeps the
rate from ``--rate`` upward and bisects for the highest rate with ≥ 90% attainment
(DistServe's goodput). Only point it at loopback or the project's own test hosts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from app.planning.goodput import (
    SLO,
    add_slo_options,
    attainment,
    find_goodput,
    requests_at,
    slo_from_options,
)
from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import one_request
from load_tests.client.workloads import WORKLOADS, Request, rate_rng
from load_tests.systems.run_conditions import app_settings, machine


async def run_at_rate(
    url: str, requests: list[Request], rate: float, seed: int, progress: bool = True
) -> tuple[list[StreamTiming], list[str], float]:
    """Send ``requests`` as a Poisson process of ``rate`` req/s; wait for all to finish."""
    rng = random.Random(seed)
    timings: list[StreamTiming] = []
    failures: list[str] = []
    bar = tqdm(total=len(requests), desc=f"{rate:g} req/s", disable=not progress)
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=None)) as client:

        async def send(prompt: list[int], max_tokens: int) -> None:
            try:
                timings.append(await one_request(client, url, None, prompt, max_tokens))
            except (RuntimeError, httpx.HTTPError) as exc:
                failures.append(str(exc))
            bar.update(1)

        tasks = []
        started = time.perf_counter()
        for prompt, max_tokens in requests:
            tasks.append(asyncio.create_task(send(prompt, max_tokens)))
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
    bar.close()
    return timings, failures, wall


def summary(
    timings: list[StreamTiming], failures: list[str], wall: float, slo: SLO
) -> dict[str, Any]:
    gaps = [g for t in timings for g in t.chunk_gaps]
    transfers = [t.server for t in timings if t.server]
    count = len(timings) or 1
    prefilled = [s for s in transfers if s.get("prefill_engine")]
    prompt_total = sum(
        t.prompt_tokens for t in timings if t.server and t.server.get("prefill_engine")
    )
    return {
        "ok": len(timings),
        "failed": len(failures),
        "failures": failures[:5],
        "wall_s": wall,
        "output_tok_per_s": sum(t.output_tokens for t in timings) / wall if wall else 0.0,
        "slo_attainment": attainment(timings, slo, failed=len(failures)),
        "ttft_ms": summarize([t.ttft for t in timings], 1000),
        "tpot_ms": summarize([t.tpot for t in timings if t.output_tokens > 1], 1000),
        "itl_ms": summarize(gaps, 1000),
        "e2e_ms": summarize([t.end for t in timings], 1000),
        "kv_bytes": sum(int(s.get("kv_bytes") or 0) for s in transfers),
        "kv_transports": sorted({str(s.get("kv_transport")) for s in transfers}),
        # For `splitserve advise --result`:
        "prompt_tokens_mean": sum(t.prompt_tokens for t in timings) / count,
        "output_tokens_mean": sum(t.output_tokens for t in timings) / count,
        "prefix_hit_rate": (
            sum(int(s.get("prefill_cached_tokens") or 0) for s in prefilled) / prompt_total
            if prompt_total
            else None
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8100")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="mixed")
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second")
    parser.add_argument("--requests", type=int, default=100)
    add_slo_options(parser, ttft_ms=500.0, tpot_ms=50.0)
    parser.add_argument("--goodput", action="store_true", help="sweep and bisect the rate")
    parser.add_argument("--goodput-seconds", type=float, default=20.0, help="arrivals per rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--config", help="the serve config the endpoint runs (recorded in the conditions)"
    )
    parser.add_argument("--out", default="load_tests/results/loadgen.json")
    args = parser.parse_args()

    slo, target = slo_from_options(args)
    requests = WORKLOADS[args.workload](random.Random(args.seed), args.requests)
    runs: list[dict[str, Any]] = []

    def measure(rate: float) -> float:
        batch = requests
        if args.goodput:  # at least --goodput-seconds of arrivals at every rate tried
            count = requests_at(rate, args.goodput_seconds, args.requests)
            batch = WORKLOADS[args.workload](rate_rng(args.seed, rate), count)
        timings, failures, wall = asyncio.run(run_at_rate(args.url, batch, rate, args.seed))
        runs.append({"rate": rate, **summary(timings, failures, wall, slo)})
        return float(runs[-1]["slo_attainment"])

    result: dict[str, Any] = {
        "conditions": {
            **{k: v for k, v in vars(args).items() if k != "out"},
            "client": machine(),
            "app": app_settings(args.config) if args.config else None,
        }
    }
    if args.goodput:
        search = find_goodput(measure, start_rate=args.rate, target=target)
        result["goodput_req_per_s"] = search.goodput
    else:
        measure(args.rate)
    result["runs"] = runs
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
