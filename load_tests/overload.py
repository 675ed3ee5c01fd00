"""Cold start and overload, in one run: what ready means, and what admission control sheds.

    scripts/loopback-netns .venv/bin/python -m load_tests.overload [--config ...] \
        [--seconds 30] [--out docs/overload.json]

1. Starts the app, every prompt prefilled remotely (``local_prefill_below_tokens: 0``),
   and sends the first request the moment it is ready (256 prompt tokens, 64 output
   tokens), then 10 more one at a time: first-request TTFT
   ÷ warm TTFT p50, and how the first request's KV moved.
2. Measures capacity: the same requests from 8 clients in a closed loop (requests/s; a
   shed client retries after a second).
3. Sends Poisson arrivals at 1x, 2x and 4x that capacity for ``--seconds`` each and
   counts the answers: 200 (completed), 503 (shed, with Retry-After), anything else.
   Goodput: completed requests whose TTFT met the SLO (the admission budget,
   ``ingress.admission.ttft_budget_s``), per second of the run. Also the TTFT p50/p99 of
   admitted requests. Prints JSON with the run conditions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx

from app.config import AppConfig
from load_tests.local_app import LocalApp, config_args, merge
from load_tests.run_conditions import machine
from load_tests.stats import StreamTiming, summarize
from load_tests.stream_bench import RequestFailed, one_request
from load_tests.workloads import fixed

PROMPT, OUTPUT = 256, 64


async def cold_start(url: str, rng: random.Random) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=600) as client:
        first = await one_request(client, url, None, *fixed(rng, 1, PROMPT, OUTPUT)[0])
        warm = [
            await one_request(client, url, None, p, n) for p, n in fixed(rng, 10, PROMPT, OUTPUT)
        ]
    warm_p50 = summarize([t.ttft for t in warm], 1000)["p50"]
    report = first.server or {}
    return {
        "first_ttft_ms": round(first.ttft * 1000, 1),
        "warm_ttft_p50_ms": round(warm_p50, 1),
        "first_over_warm": round(first.ttft * 1000 / warm_p50, 2),
        "first_kv_transport": report.get("kv_transport"),
        "first_fallbacks": report.get("fallbacks"),
    }


async def capacity(url: str, rng: random.Random, clients: int = 8, count: int = 32) -> float:
    """Requests/s completed by ``clients`` in a closed loop; a client that is shed (503)
    waits the ``Retry-After`` and sends the same request again, as a polite client does."""
    queue = list(fixed(rng, count, PROMPT, OUTPUT))
    done = 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal done
        while queue:
            prompt, max_tokens = queue.pop()
            while True:
                try:
                    await one_request(client, url, None, prompt, max_tokens)
                    break
                except RequestFailed as exc:
                    if exc.status != 503:
                        raise
                    await asyncio.sleep(1.0)
            done += 1

    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
        wall = time.perf_counter() - started
    return done / wall


async def poisson(url: str, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """Open-loop arrivals at ``rate`` for ``seconds``; every answer counted by status."""
    rng = random.Random(seed)
    timings: list[StreamTiming] = []
    statuses: dict[str, int] = {}
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:

        async def send(prompt: list[int], max_tokens: int) -> None:
            try:
                timings.append(await one_request(client, url, None, prompt, max_tokens))
                key = "200"
            except RequestFailed as exc:
                key = str(exc.status) if exc.status else "error event"
            except httpx.HTTPError as exc:
                key = type(exc).__name__
            statuses[key] = statuses.get(key, 0) + 1

        started = time.perf_counter()
        sent = await arrivals(rate, seconds, rng, lambda _at, p, n: send(p, n))
        wall = time.perf_counter() - started
    return {"sent": sent, "statuses": statuses, "timings": timings, "wall_s": wall}


async def arrivals(
    rate: float,
    seconds: float,
    rng: random.Random,
    send: Callable[[float, list[int], int], Coroutine[Any, Any, None]],
) -> int:
    """Poisson arrivals of this run's requests at ``rate`` for ``seconds``: ``send(sent at
    (s), prompt, max_tokens)`` for each, all awaited; how many were sent."""
    tasks = []
    started = time.perf_counter()
    while (now := time.perf_counter() - started) < seconds:
        prompt, max_tokens = fixed(rng, 1, PROMPT, OUTPUT)[0]
        tasks.append(asyncio.create_task(send(now, prompt, max_tokens)))
        await asyncio.sleep(rng.expovariate(rate))
    await asyncio.gather(*tasks)
    return len(tasks)


def summary(run: dict[str, Any], budget_s: float) -> dict[str, Any]:
    timings: list[StreamTiming] = run["timings"]
    met = [t for t in timings if t.ttft <= budget_s]
    ttft = summarize([t.ttft for t in timings], 1000) if timings else {}
    shed = run["statuses"].get("503", 0)
    paths: dict[str, int] = {}
    for t in timings:
        report = t.server or {}
        kinds = "+".join(f["kind"] for f in report.get("fallbacks") or [])
        key = f"{report.get('decision')}/{report.get('kv_transport')}" + (
            f"/{kinds}" if kinds else ""
        )
        paths[key] = paths.get(key, 0) + 1
    return {
        "sent": run["sent"],
        "statuses": run["statuses"],
        "paths": paths,
        "shed_share": round(shed / max(run["sent"], 1), 3),
        "goodput_rps": round(len(met) / run["wall_s"], 3),
        "admitted_ttft_p50_ms": round(ttft.get("p50", 0.0), 1),
        "admitted_ttft_p99_ms": round(ttft.get("p99", 0.0), 1),
        "admitted_meeting_slo": round(len(met) / max(len(timings), 1), 3),
    }


async def measure(url: str, seconds: float, budget_s: float) -> dict[str, Any]:
    rng = random.Random(0)
    result: dict[str, Any] = {"cold_start": await cold_start(url, rng)}
    rate = await capacity(url, rng)
    result["capacity_rps"] = round(rate, 3)
    for multiple in (1, 2, 4):
        run = await poisson(url, rate * multiple, seconds, seed=multiple)
        result[f"{multiple}x"] = {"rate_rps": round(rate * multiple, 3), **summary(run, budget_s)}
    one, four = result["1x"]["goodput_rps"], result["4x"]["goodput_rps"]
    result["goodput_4x_over_1x"] = round(four / one, 3) if one else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--override", type=json.loads, default={}, help="config args to merge, as JSON"
    )
    args = parser.parse_args()
    # Every prompt goes remote, as in production at longer prompts (the default config
    # prefills prompts under 512 tokens on decode).
    overrides = merge({"router": {"local_prefill_below_tokens": 0}}, args.override)
    config = AppConfig.model_validate(merge(config_args(args.config), overrides))
    budget = config.ingress.admission.ttft_budget_s
    with LocalApp(args.config, overrides=overrides) as app:
        result = asyncio.run(measure(app.url, args.seconds, budget))
    result["conditions"] = {
        "config": args.config,
        "overrides": overrides,
        "prompt_tokens": PROMPT,
        "output_tokens": OUTPUT,
        "seconds_per_rate": args.seconds,
        "slo_ttft_s": budget,
        **machine(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
