"""Cold start and overload, in one run: what ready means, and what admission control sheds.

    scripts/loopback-netns .venv/bin/python -m load_tests.reliability.overload [--config ...] \
        [--seconds 20] [--out docs/results/overload.json] [--plot docs/img/overload.png]

1. Starts the app, every prompt prefilled remotely (``local_prefill_below_tokens: 0``),
   and sends the first request the moment it is ready (256 prompt tokens, 64 output
   tokens), then 10 more one at a time: first-request TTFT
   ÷ warm TTFT p50, and how the first request's KV moved.
2. Measures capacity C: the same requests from 16 clients in a closed loop (requests/s;
   a shed client retries after a second). (8 clients left the engines idle part of the
   time: at 8x that C the app still completed 1.8x as many within the budget.)
3. Sends Poisson arrivals at 0.5x, 1x, 2x, 4x and 8x that capacity for ``--seconds``
   each and counts the answers: 200 (completed), 503 (shed, with Retry-After), anything
   else. Goodput: completed requests whose TTFT met the SLO (the admission budget,
   ``ingress.admission.ttft_budget_s``), per second of the run. Also the TTFT p50/p99 of
   admitted requests. Arrivals follow an absolute schedule and TTFT counts from it.
4. The same offered loads against vLLM's own OpenAI server on the same model (one
   engine, no shedding: it queues), unless ``--no-vllm``.

Prints JSON with the run conditions; ``--plot`` draws goodput and refusals against the
offered load.
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
from load_tests.client import aio_stream
from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import RequestFailed, one_request
from load_tests.client.workloads import fixed
from load_tests.systems.local_app import LocalApp, config_args, merge
from load_tests.systems.run_conditions import machine

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


async def capacity(url: str, rng: random.Random, clients: int = 16, count: int = 64) -> float:
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
    """Open-loop Poisson arrivals at ``rate`` for ``seconds``; every answer counted by
    status. Arrivals are scheduled at absolute times and each TTFT counts from its
    scheduled time, so a client that falls behind shows as latency, not as less load;
    the rate achieved is reported beside the rate asked."""
    import aiohttp

    rng = random.Random(seed)
    timings: list[StreamTiming] = []
    statuses: dict[str, int] = {}
    async with aio_stream.session() as client:

        async def send(at: float, prompt: list[int], max_tokens: int) -> None:
            body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens}
            try:
                got = await aio_stream.stream_completion(
                    client, url, {**body, "temperature": 0, "ignore_eos": True}, since=at
                )
            except aiohttp.ClientError as exc:
                key = type(exc).__name__
            else:
                key = _outcome(got)
                if key == "200" and got.ttft_s is not None:
                    tokens = int(got.usage.get("completion_tokens") or 0)
                    timings.append(StreamTiming(got.ttft_s, got.end_s, tokens, got.report))
            statuses[key] = statuses.get(key, 0) + 1

        started = time.perf_counter()
        sent = await arrivals(rate, seconds, rng, send)
        wall = time.perf_counter() - started
    return {
        "sent": sent,
        "statuses": statuses,
        "timings": timings,
        "wall_s": wall,
        "achieved_rps": round(sent / seconds, 3),
    }


def _outcome(got: aio_stream.Streamed) -> str:
    """How a request ended: "200", a status and the rule that refused it, "error event"."""
    if got.status != 200:
        return f"{got.status}{_why(got.error)}"
    if got.error:
        return "error event"
    return "200" if got.ttft_s is not None else "no tokens"


_REASONS = (  # a 503's message -> the admission rule that refused it (app.api.admission)
    ("and the pools serve", "predicted_wait"),
    ("for a first token (budget", "oldest_wait"),
    ("already wait for their first token", "max_waiting"),
    ("queue is full", "pool_queue_full"),
)


def _why(body: str) -> str:
    """`` <reason>`` for a refusal whose message names an admission rule, else ''."""
    return next((f" {reason}" for text, reason in _REASONS if text in body), "")


async def arrivals(
    rate: float,
    seconds: float,
    rng: random.Random,
    send: Callable[[float, list[int], int], Coroutine[Any, Any, None]],
) -> int:
    """Poisson arrivals of this run's requests at ``rate`` for ``seconds``: ``send(its
    scheduled time (perf_counter s), prompt, max_tokens)`` for each, all awaited; how
    many were sent. The schedule is absolute: a late loop sends what is due at once."""
    tasks = []
    started = time.perf_counter()
    due = 0.0
    while due < seconds:
        prompt, max_tokens = fixed(rng, 1, PROMPT, OUTPUT)[0]
        wait = started + due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(send(started + due, prompt, max_tokens)))
        due += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    return len(tasks)


def summary(run: dict[str, Any], budget_s: float) -> dict[str, Any]:
    timings: list[StreamTiming] = run["timings"]
    met = [t for t in timings if t.ttft <= budget_s]
    ttft = summarize([t.ttft for t in timings], 1000) if timings else {}
    shed = sum(n for status, n in run["statuses"].items() if status.startswith("503"))
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


MULTIPLES = (0.5, 1.0, 2.0, 4.0, 8.0)


async def sweep(url: str, rate: float, seconds: float, budget_s: float) -> dict[str, Any]:
    """Poisson arrivals at each multiple of ``rate``, one after the other."""
    loads = {}
    for n, multiple in enumerate(MULTIPLES):
        run = await poisson(url, rate * multiple, seconds, seed=n + 1)
        loads[f"{multiple:g}x"] = {
            "rate_rps": round(rate * multiple, 3),
            "achieved_rps": run["achieved_rps"],
            **summary(run, budget_s),
        }
    return loads


async def measure(url: str, seconds: float, budget_s: float) -> dict[str, Any]:
    rng = random.Random(0)
    result: dict[str, Any] = {"cold_start": await cold_start(url, rng)}
    rate = await capacity(url, rng)
    result["capacity_rps"] = round(rate, 3)
    result["loads"] = await sweep(url, rate, seconds, budget_s)
    one, four = result["loads"]["1x"]["goodput_rps"], result["loads"]["4x"]["goodput_rps"]
    result["goodput_4x_over_1x"] = round(four / one, 3) if one else None
    return result


def plot(result: dict[str, Any], out: Path) -> None:
    """Goodput and the share shed against the offered load, splitserve beside vLLM."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = result["conditions"]
    figure, (goodput, shed) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, loads, style in (
        ("splitserve (admission on)", result["loads"], "o-"),
        ("vLLM's own server (no shedding)", result.get("vllm", {}).get("loads", {}), "s--"),
    ):
        if not loads:
            continue
        xs = [float(k[:-1]) for k in loads]
        goodput.plot(xs, [v["goodput_rps"] for v in loads.values()], style, label=name)
        shed.plot(xs, [100 * v["shed_share"] for v in loads.values()], style, label=name)
    for axes, label in ((goodput, "goodput (req/s, TTFT <= budget)"), (shed, "refused (%)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(list(MULTIPLES), [f"{m:g}x" for m in MULTIPLES])
        axes.set_xlabel(f"offered load (x capacity C = {result['capacity_rps']:.1f} req/s)")
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper left", fontsize=8)
    figure.suptitle(
        f"Overload, {conditions['date']}: {conditions.get('cpu', '?')}, "
        f"{conditions['prompt_tokens']} in / {conditions['output_tokens']} out, "
        f"{conditions['seconds_per_rate']:g} s per load, budget {conditions['slo_ttft_s']:g} s",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="PNG: goodput and refusals vs load")
    parser.add_argument(
        "--no-vllm", action="store_true", help="skip vLLM's own server at the same loads"
    )
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
    if not args.no_vllm:
        from load_tests.systems.vllm_server import vllm_server

        # The same offered loads (splitserve's C) against vLLM's server, one engine.
        with vllm_server() as url:
            loads = asyncio.run(sweep(url, result["capacity_rps"], args.seconds, budget))
        result["vllm"] = {"engine_cores": "0", "loads": loads}
    result["conditions"] = {
        "config": args.config,
        "overrides": overrides,
        "prompt_tokens": PROMPT,
        "output_tokens": OUTPUT,
        "seconds_per_rate": args.seconds,
        "slo_ttft_s": budget,
        "date": time.strftime("%Y-%m-%d"),
        **machine(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
