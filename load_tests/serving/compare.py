"""Side by side on one machine: splitserve disaggregated, splitserve colocated, vLLM's own
OpenAI server and Ray Serve LLM's PD app, with the same workloads and the same SLO, one
system at a time.

    scripts/loopback-netns .venv/bin/python -m load_tests.serving.compare   (or: make bench-compare)

For each system: start-up time (until a completion is answered), idle CPU and memory of
all its processes, then (each of 1-3 with each pool's utilization over it,
``load_tests.systems.pool_usage``)
1. concurrency 1, 128-in/128-out: TTFT and TPOT with no contention;
2. concurrency 16, 128-in/128-out: output tokens/s (closed loop);
3. the interference case: Poisson ``--rate`` req/s of the ``mixed`` workload (80%
   128-in/128-out streams, 20% 1536-in/8-out long prompts): TTFT p99, ITL p99 and TPOT of
   the *short* requests, i.e. how much long prompts stall everyone's stream;
4. goodput on the same mix (DistServe: the highest rate with >= 90% of requests inside
   both the TTFT and the TPOT SLO), by rate sweep and bisection, each rate sending
   ``--goodput-seconds`` of arrivals; ``--no-goodput`` skips it.
Writes JSON with the run conditions and the raw samples (``load_tests.reports.plots`` draws the
CDFs from it) and prints a table.

Cores (2 on this machine, the same total for every system): splitserve disaggregated
runs prefill on core 0 and decode on core 1; the colocated systems bind their engine to
core 0 and leave core 1 to the frontend, which measured fastest for vLLM here; Ray
Serve LLM's PD app (``load_tests.systems.ray_llm_pd``) runs prefill on core 0, decode on core 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from app.planning.goodput import (
    add_slo_options,
    attainment,
    find_goodput_repeated,
    median_goodput,
    misses,
    requests_at,
    slo_from_options,
)
from load_tests.client.loadgen import run_at_rate
from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import closed_loop, one_request
from load_tests.client.workloads import fixed, mixed, rate_rng
from load_tests.systems.local_app import LocalApp, merge
from load_tests.systems.pool_usage import PoolUsage
from load_tests.systems.process_usage import cpu_by_group, memory_by_group
from load_tests.systems.run_conditions import app_settings, machine
from load_tests.systems.vllm_server import MAX_MODEL_LEN, vllm_server


@contextmanager
def splitserve(
    config: str,
    overrides: dict[str, Any] | None = None,
    cluster_env: bool = True,
    via_proxy: bool = False,
    metrics_report_interval_ms: int | None = 1000,
) -> Iterator[str]:
    """The app of ``config`` on this host; Ray exports metrics every second (the pools'
    usage is read from them) unless ``metrics_report_interval_ms`` says otherwise (None:
    Ray's default, 10 s, as `make run` has it)."""
    overrides = merge({"model": {"max_model_len": MAX_MODEL_LEN}}, overrides or {})
    with LocalApp(
        config,
        overrides=overrides,
        cluster_env=cluster_env,
        metrics_report_interval_ms=metrics_report_interval_ms,
    ) as app:
        yield app.proxy_url if via_proxy else app.url


async def warm_up(url: str) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        await one_request(client, url, "tiny-llama", list(range(10, 138)), 4)


async def fixed_load(url: str, count: int, concurrency: int, seed: int) -> dict[str, Any]:
    """``count`` requests of 128 in / 128 out at ``concurrency`` (closed loop), summed up."""
    requests = fixed(random.Random(seed), count, input_len=128, output_len=128)
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        timings, failures = await closed_loop(client, url, "tiny-llama", requests, concurrency)
        wall = time.perf_counter() - started
    return {
        "failed": len(failures),
        "output_tok_per_s": sum(t.output_tokens for t in timings) / wall,
        "ttft_ms": summarize([t.ttft for t in timings], 1000),
        "tpot_ms": summarize([t.tpot for t in timings], 1000),
        "ttft_samples_ms": [round(t.ttft * 1000, 2) for t in timings],
    }


def _mixed_summary(timings: list[StreamTiming], failures: list[str], wall: float) -> dict[str, Any]:
    short = [t for t in timings if t.prompt_tokens <= 128]
    gaps = [g for t in short for g in t.chunk_gaps]
    return {
        "failed": len(failures),
        "output_tok_per_s": sum(t.output_tokens for t in timings) / wall,
        "short_ttft_ms": summarize([t.ttft for t in short], 1000),
        "short_itl_ms": summarize(gaps, 1000),
        "short_tpot_ms": summarize([t.tpot for t in short], 1000),
        "long_ttft_ms": summarize([t.ttft for t in timings if t.prompt_tokens > 128], 1000),
        "kv_bytes": sum(int((t.server or {}).get("kv_bytes") or 0) for t in timings),
        "short_ttft_samples_ms": [round(t.ttft * 1000, 2) for t in short],
        "short_itl_samples_ms": [round(g * 1000, 2) for g in gaps],
    }


def measure(url: str, args: argparse.Namespace, started: float) -> dict[str, Any]:
    asyncio.run(warm_up(url))
    row: dict[str, Any] = {"startup_s": round(time.perf_counter() - started, 1)}
    time.sleep(3)
    idle = cpu_by_group(args.idle_s)
    row["idle_cpu_pct"] = {k: round(v, 1) for k, v in idle.items()}
    row["idle_cpu_total_pct"] = round(sum(idle.values()), 1)
    row["rss_total_mib"] = round(sum(memory_by_group("rss").values()))
    row["pss_total_mib"] = round(sum(memory_by_group("pss").values()))
    with PoolUsage(url) as usage:
        row["c1"] = asyncio.run(fixed_load(url, args.c1_requests, 1, args.seed))
    row["c1"]["pools"] = usage.result
    with PoolUsage(url) as usage:
        row["c16"] = asyncio.run(fixed_load(url, args.c16_requests, 16, args.seed + 1))
    row["c16"]["pools"] = usage.result
    requests = mixed(random.Random(args.seed), args.mixed_requests)
    with PoolUsage(url) as usage:
        timings, failures, wall = asyncio.run(
            run_at_rate(url, requests, args.rate, args.seed, progress=args.progress)
        )
    row["mixed"] = _mixed_summary(timings, failures, wall)
    row["mixed"]["pools"] = usage.result
    if args.goodput:
        slo, target = slo_from_options(args)
        breakdown: list[dict[str, Any]] = []  # per rate tried: where requests missed

        def attained(rate: float, repeat: int) -> float:
            count = requests_at(rate, args.goodput_seconds, args.goodput_requests)
            sweep = mixed(rate_rng(args.seed + 2 + 1000 * repeat, rate), count)
            timings, failures, _ = asyncio.run(
                run_at_rate(url, sweep, rate, args.seed, progress=args.progress)
            )
            short = [t for t in timings if t.prompt_tokens <= 128]
            long = [t for t in timings if t.prompt_tokens > 128]
            breakdown.append(
                {
                    "repeat": repeat,
                    "rate": rate,
                    "failed": len(failures),
                    "short": misses(short, slo),
                    "long": misses(long, slo),
                }
            )
            return attainment(timings, slo, failed=len(failures))

        searches = find_goodput_repeated(
            attained,
            args.goodput_repeats,
            start_rate=args.goodput_start_rate,
            target=target,
            bisections=3,
            max_rate=args.goodput_max_rate,
        )
        # The median of the searches; each search's own, in order, and every rate tried.
        row["goodput_req_per_s"] = median_goodput(searches)
        row["goodput_runs_req_per_s"] = [search.goodput for search in searches]
        row["goodput_tried"] = [tried for search in searches for tried in search.tried]
        row["goodput_breakdown"] = breakdown
    return row


CHUNKED_STEPS = {"max_num_batched_tokens": 512, "long_prefill_token_threshold": 384}

SYSTEMS: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "splitserve disaggregated": lambda: splitserve("serve_configs/default.yaml"),
    "splitserve colocated": lambda: splitserve("serve_configs/colocated.yaml"),
    "vLLM OpenAI server": vllm_server,
    "Ray Serve LLM PD": lambda: _ray_llm_pd(),
    # Not run by default: variants of the disaggregated app.
    "splitserve disaggregated, unbatched stream": lambda: splitserve(
        "serve_configs/default.yaml", {"decode": {"stream_interval_ms": 0}}
    ),
    "splitserve disaggregated, every prompt remote": lambda: splitserve(
        "serve_configs/default.yaml", {"router": {"local_prefill_below_tokens": 0}}
    ),
    # The same, the first token sampled on decode (before router.first_token_on_prefill).
    "splitserve disaggregated, every prompt remote, first token on decode": lambda: splitserve(
        "serve_configs/default.yaml",
        {"router": {"local_prefill_below_tokens": 0, "first_token_on_prefill": False}},
    ),
    # The same, the prefill engine stepping at most 512 tokens, a long prompt at most 384
    # of them while others wait: a short prompt behind a long one joins the next step.
    "splitserve disaggregated, every prompt remote, prefill in 512-token steps": lambda: splitserve(
        "serve_configs/default.yaml",
        {
            "router": {"local_prefill_below_tokens": 0},
            "prefill": CHUNKED_STEPS,
        },
    ),
    "splitserve colocated, 512-token steps": lambda: splitserve(
        "serve_configs/colocated.yaml", {"decode": CHUNKED_STEPS}
    ),
    # The same app, its clients going through Serve's proxy (port 8000 under `make run`).
    "splitserve disaggregated, through Serve's proxy": lambda: splitserve(
        "serve_configs/default.yaml", via_proxy=True
    ),
    # vLLM's CPU default: the model in a worker process of its own, beside the engine core.
    "splitserve disaggregated, engine worker processes": lambda: splitserve(
        "serve_configs/default.yaml", {"model": {"executor": "mp"}}
    ),
    # Ray Serve's default request path: Ray actor calls, a thread and loop per replica.
    "splitserve disaggregated, Serve's default request path": lambda: splitserve(
        "serve_configs/default.yaml",
        {"request_path": {"grpc": False, "replica_event_loop": False}},
        cluster_env=False,
    ),
}
DEFAULT_SYSTEMS = list(SYSTEMS)[:4]


def _ray_llm_pd() -> AbstractContextManager[str]:
    from load_tests.systems.ray_llm_pd import ray_serve_llm_pd

    return ray_serve_llm_pd(MAX_MODEL_LEN)


def conditions(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **{k: v for k, v in vars(args).items() if k not in ("out", "progress")},
        "max_model_len": MAX_MODEL_LEN,
        # The share of requests that must meet the SLO (splitserve advise --result reads it).
        "slo_attainment": slo_from_options(args)[1],
        "date": time.strftime("%Y-%m-%d"),
        **machine(),
        "splitserve_configs": {
            name: app_settings(f"serve_configs/{name}.yaml") for name in ("default", "colocated")
        },
        "cores": {
            "splitserve disaggregated": "prefill engine core 0, decode engine core 1",
            "splitserve colocated": "engine core 0, frontend floats",
            "vLLM OpenAI server": "engine core and worker processes core 0, API server floats",
            "Ray Serve LLM PD": "prefill engine core 0, decode engine core 1",
        },
        "splitserve": "serve_configs defaults (stream batching 50 ms / 200 chunks/s, prompts "
        "under 512 tokens prefilled on decode) unless the system's name says otherwise",
        "workloads": {
            "c1": "128 in / 128 out, ignore_eos, concurrency 1",
            "c16": "128 in / 128 out, ignore_eos, concurrency 16",
            "mixed": f"Poisson {args.rate:g} req/s; 80% 128/128, 20% 1536/8",
        },
    }


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    columns: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("start s", lambda r: r["startup_s"]),
        ("idle CPU %", lambda r: r["idle_cpu_total_pct"]),
        ("PSS MiB", lambda r: r["pss_total_mib"]),
        ("c1 TTFT p50", lambda r: r["c1"]["ttft_ms"]["p50"]),
        ("c1 TPOT p50", lambda r: r["c1"]["tpot_ms"]["p50"]),
        ("c16 tok/s", lambda r: r["c16"]["output_tok_per_s"]),
        ("mix TTFT p99", lambda r: r["mixed"]["short_ttft_ms"]["p99"]),
        ("mix ITL p99", lambda r: r["mixed"]["short_itl_ms"]["p99"]),
        ("mix TPOT p50", lambda r: r["mixed"]["short_tpot_ms"]["p50"]),
        ("goodput", lambda r: r.get("goodput_req_per_s", float("nan"))),
    ]
    print(f"{'system':<44}" + "".join(f"{name:>13}" for name, _ in columns))
    for system, row in rows.items():
        print(f"{system:<44}" + "".join(f"{get(row):>13.1f}" for _, get in columns))
    print("\nper-pool utilization: busy % of wall time (mean per replica) / engine CPU % of a core")
    for system, row in rows.items():
        for workload in ("c1", "c16", "mixed"):
            pools = row[workload].get("pools", {})
            cells = [
                f"{pool} {f.get('busy_pct', float('nan')):.0f}/{f.get('cpu_pct', 0):.0f}"
                for pool, f in sorted(pools.items())
            ]
            print(f"{system:<44}{workload:>7}  " + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", nargs="*", choices=sorted(SYSTEMS), default=DEFAULT_SYSTEMS)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--c1-requests", type=int, default=30)
    parser.add_argument("--c16-requests", type=int, default=96)
    parser.add_argument("--mixed-requests", type=int, default=120)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--goodput", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--goodput-requests", type=int, default=40, help="fewest per rate")
    parser.add_argument("--goodput-seconds", type=float, default=20.0, help="arrivals per rate")
    parser.add_argument(
        "--goodput-max-rate",
        type=float,
        default=64.0,
        help="stop the sweep here (one Python client on 2 cores cannot send much more)",
    )
    parser.add_argument("--goodput-start-rate", type=float, default=2.0)
    parser.add_argument(
        "--goodput-repeats",
        type=int,
        default=1,
        help="goodput searches per system, one after another, each with prompts of its "
        "own; the row gives their median and each one",
    )
    add_slo_options(parser, ttft_ms=200.0, tpot_ms=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", default="load_tests/results/compare.json")
    args = parser.parse_args()
    if args.goodput_repeats < 1:
        parser.error(f"--goodput-repeats must be at least 1, got {args.goodput_repeats}")
    rows: dict[str, dict[str, Any]] = {}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.systems:
        started = time.perf_counter()
        with SYSTEMS[name]() as url:
            rows[name] = measure(url, args, started)
        # Written after every system, so a later failure loses nothing measured.
        result = {"conditions": conditions(args), "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"{name}: done", flush=True)
    print_table(rows)


if __name__ == "__main__":
    main()
