"""What the serving path costs, by process, beside vLLM's own server in the same run.

    make bench-serving-cost
    (scripts/loopback-netns .venv/bin/python -m load_tests.serving.serving_cost)

For each system in turn (``--systems``, from :data:`SYSTEMS`: vLLM's server and splitserve's
configs as shipped, with Ray's default metrics export period; cores as
:mod:`load_tests.serving.compare` binds them): start it, warm it up, read every process
group's CPU while it idles (``--idle-s``), then run closed loops of ``--input-len`` in /
``--output-len`` out at each ``--concurrency``. Per level:

- output tokens/s, TTFT p50/p99;
- the token gap a client sees (seconds between SSE events that carry text) p50/p99/max,
  how many gaps were over 100 ms, and output tokens per such event;
- CPU milliseconds per 1,000 output tokens of every process group
  (:mod:`load_tests.systems.process_usage`), their sum over the groups that are not the engine's
  own processes (``serving``: ingress, replicas with vLLM's front half, Serve's proxy and
  controller, raylet, GCS, agents; for vLLM's server, its API server) and the engine's.

With ``--profile-s`` (default 10), py-spy samples the busiest process of each of the three
serving groups that used the most CPU at the highest concurrency, during one more run at
it, and the JSON lists each one's top functions, by own time and on the stack, in samples
taken while a thread held the GIL (``py-spy record --gil -f raw``).
The client runs in this process, which no figure counts. Writes JSON with the run
conditions (``--out``) and prints a table; docs/performance.md reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import closed_loop
from load_tests.client.workloads import fixed
from load_tests.serving.compare import splitserve, warm_up
from load_tests.systems.process_usage import CpuSpent, cpu_by_group
from load_tests.systems.run_conditions import machine
from load_tests.systems.vllm_server import vllm_server

ENGINE_GROUPS = frozenset({"engine core", "engine worker"})
STALL_S = 0.1
SYSTEMS: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "vLLM OpenAI server": vllm_server,
    "splitserve colocated": lambda: splitserve(
        "serve_configs/colocated.yaml", metrics_report_interval_ms=None
    ),
    "splitserve default": lambda: splitserve(
        "serve_configs/default.yaml", metrics_report_interval_ms=None
    ),
    # The same two with every chunk through Serve (request_path.direct_stream off): the
    # direct stream's before and after, in the same run.
    "splitserve colocated, chunks through Serve": lambda: splitserve(
        "serve_configs/colocated.yaml",
        {"request_path": {"direct_stream": False}},
        metrics_report_interval_ms=None,
    ),
    "splitserve default, chunks through Serve": lambda: splitserve(
        "serve_configs/default.yaml",
        {"request_path": {"direct_stream": False}},
        metrics_report_interval_ms=None,
    ),
    # The pacing budget (stream_messages_per_s, 200 as shipped) raised: named with
    # --systems only (docs/performance.md, section 17).
    "splitserve colocated, 400 chunks/s": lambda: splitserve(
        "serve_configs/colocated.yaml",
        {"decode": {"stream_messages_per_s": 400}},
        metrics_report_interval_ms=None,
    ),
    "splitserve colocated, 800 chunks/s": lambda: splitserve(
        "serve_configs/colocated.yaml",
        {"decode": {"stream_messages_per_s": 800}},
        metrics_report_interval_ms=None,
    ),
    "splitserve, every prompt remote": lambda: splitserve(
        "serve_configs/default.yaml",
        {"router": {"local_prefill_below_tokens": 0}},
        metrics_report_interval_ms=None,
    ),
}


def per_kilo_token(seconds: dict[str, float], tokens: int) -> dict[str, float]:
    """CPU ms per 1,000 output tokens of each group, with ``serving`` (every group but the
    engine's own processes) and ``engine`` totals."""
    if tokens <= 0:
        return {}
    scale = 1e6 / tokens
    row = {group: round(s * scale, 1) for group, s in seconds.items()}
    row["serving"] = round(sum(s for g, s in seconds.items() if g not in ENGINE_GROUPS) * scale, 1)
    row["engine"] = round(sum(s for g, s in seconds.items() if g in ENGINE_GROUPS) * scale, 1)
    return row


def stream_shape(timings: list[StreamTiming]) -> dict[str, Any]:
    """The token gap as the client saw it, stalls, and output tokens per text event."""
    gaps = [g for t in timings for g in t.chunk_gaps]
    events = sum(len(t.chunk_gaps) + 1 for t in timings if t.output_tokens)
    tokens = sum(t.output_tokens for t in timings)
    return {
        "token_gap_ms": summarize(gaps, 1000),
        "token_gap_max_ms": round(1000 * max(gaps), 1) if gaps else None,
        "stalls_over_100ms": sum(g > STALL_S for g in gaps),
        "tokens_per_event": round(tokens / events, 2) if events else None,
    }


async def _load(url: str, args: argparse.Namespace, concurrency: int, seed: int) -> Any:
    count = max(args.min_requests, args.requests_per_stream * concurrency)
    requests = fixed(random.Random(seed), count, args.input_len, args.output_len)
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        timings, failures = await closed_loop(client, url, "tiny-llama", requests, concurrency)
        return timings, failures, time.perf_counter() - started


def level(url: str, args: argparse.Namespace, concurrency: int) -> tuple[dict[str, Any], CpuSpent]:
    with CpuSpent() as spent:
        timings, failures, wall = asyncio.run(
            _load(url, args, concurrency, args.seed + concurrency)
        )
    tokens = sum(t.output_tokens for t in timings)
    row = {
        "concurrency": concurrency,
        "requests": len(timings) + len(failures),
        "failed": len(failures),
        "failures": failures[:3],
        "wall_s": round(wall, 2),
        "output_tok_per_s": round(tokens / wall, 1),
        "ttft_ms": summarize([t.ttft for t in timings], 1000),
        **stream_shape(timings),
        "cpu_ms_per_1k_tokens": per_kilo_token(spent.seconds, tokens),
        "cpu_core_share": {g: round(s / wall, 3) for g, s in spent.seconds.items()},
    }
    return row, spent


def top_functions(raw: str, top: int = 12) -> dict[str, Any]:
    """From py-spy's raw (collapsed) output, the functions with the most samples of their
    own (``own``) and with the most samples in which they are on the stack (``total``),
    each with its share of all samples."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        own[frames[-1]] += int(count)
        for frame in set(frames):
            total[frame] += int(count)
    samples = sum(own.values()) or 1

    def shares(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "share": round(n / samples, 3)}
            for name, n in counter.most_common(top)
        ]

    return {"samples": sum(own.values()), "own": shares(own), "total": shares(total)}


def profile(url: str, args: argparse.Namespace, spent: CpuSpent) -> dict[str, Any]:
    """py-spy on the busiest process of the three serving groups that used the most CPU,
    during one more run at the highest concurrency."""
    spy = shutil.which("py-spy") or str(Path(args.python).with_name("py-spy"))
    if not Path(spy).exists():
        return {"skipped": "py-spy not found"}
    serving = {g: s for g, s in spent.seconds.items() if g not in ENGINE_GROUPS}
    groups = sorted(serving, key=lambda g: -serving[g])[:3]
    targets = {g: max(spent.by_group[g], key=lambda p: p[1])[0] for g in groups}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        spies = {}
        for group, pid in targets.items():
            command = [spy, "record", "--pid", str(pid), "--duration", str(int(args.profile_s))]
            command += ["--rate", "200", "--format", "raw", "--nonblocking", "--gil"]
            command += ["--output", f"{tmp}/{pid}.txt"]
            spies[group] = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        done = threading.Event()

        def keep_loaded() -> None:
            while not done.is_set():
                asyncio.run(_load(url, args, args.concurrency[-1], args.seed))

        loader = threading.Thread(target=keep_loaded, daemon=True)
        loader.start()
        for group, process in spies.items():
            _, err = process.communicate(timeout=args.profile_s + 60)
            path = Path(f"{tmp}/{targets[group]}.txt")
            out[group] = (
                {"pid": targets[group], **top_functions(path.read_text())}
                if path.exists()
                else {"pid": targets[group], "error": err.decode(errors="replace")[-300:]}
            )
        done.set()
        loader.join(timeout=300)
    return out


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    with SYSTEMS[name]() as url:
        asyncio.run(warm_up(url))
        row: dict[str, Any] = {"startup_s": round(time.perf_counter() - started, 1)}
        asyncio.run(_load(url, args, args.concurrency[-1], args.seed - 1))  # warm, unmeasured
        time.sleep(3)
        idle = cpu_by_group(args.idle_s)
        row["idle_cpu_pct"] = {g: round(v, 1) for g, v in idle.items()}
        row["idle_cpu_total_pct"] = round(sum(idle.values()), 1)
        row["levels"] = []
        spent = None
        for concurrency in args.concurrency:
            print(f"{name}: c={concurrency}", flush=True)
            result, spent = level(url, args, concurrency)
            row["levels"].append(result)
        if args.profile_s > 0 and spent is not None:
            row["profiles"] = profile(url, args, spent)
    return row


def round_name(name: str, round_: int) -> str:
    return name if round_ == 1 else f"{name}, round {round_}"


# The figures whose spread over rounds is reported, per concurrency level: each a path into
# a level's row.
SPREAD_FIGURES: dict[str, tuple[str, ...]] = {
    "output_tok_per_s": ("output_tok_per_s",),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "token_gap_p99_ms": ("token_gap_ms", "p99"),
    "stalls_over_100ms": ("stalls_over_100ms",),
    "tokens_per_event": ("tokens_per_event",),
    "serving_cpu_ms_per_1k_tokens": ("cpu_ms_per_1k_tokens", "serving"),
}


def spread(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's rounds: each figure's median, min and max over them, per concurrency
    level, and the idle CPU's."""

    def over(values: list[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(values), 2),
            "min": round(min(values), 2),
            "max": round(max(values), 2),
        }

    found: dict[str, Any] = {"idle_cpu_total_pct": over([r["idle_cpu_total_pct"] for r in rounds])}
    for index, at in enumerate(rounds[0]["levels"]):
        figures = {}
        for figure, path in SPREAD_FIGURES.items():
            values = []
            for r in rounds:
                value: Any = r["levels"][index]
                for key in path:
                    value = value.get(key) if isinstance(value, dict) else None
                if value is not None:
                    values.append(value)
            if values:
                figures[figure] = over(values)
        found[f"c={at['concurrency']}"] = figures
    return found


def print_spread(spreads: dict[str, dict[str, Any]]) -> None:
    """Each figure as median [min, max] over the rounds, systems side by side."""
    names = list(spreads)
    print("\nover the rounds, median [min, max]")
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    levels = [key for key in spreads[names[0]] if key.startswith("c=")]
    rows = [("idle CPU, % of a core", "idle_cpu_total_pct", None)] + [
        (f"{level} {figure}", level, figure) for level in levels for figure in SPREAD_FIGURES
    ]
    for label, key, figure in rows:
        cells = []
        for name in names:
            cell = spreads[name].get(key, {})
            cell = cell.get(figure) if figure else cell
            cells.append(f"{cell['median']} [{cell['min']}, {cell['max']}]" if cell else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    names = list(rows)
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))

    def line(label: str, value: Any) -> None:
        print(f"| {label} | " + " | ".join(value(rows[n]) for n in names) + " |")

    line("idle CPU, % of a core", lambda r: f"{r['idle_cpu_total_pct']:.1f}")
    for index, at in enumerate(rows[names[0]]["levels"]):
        c = at["concurrency"]

        def get(r: dict[str, Any], key: str, index: int = index) -> Any:
            return r["levels"][index][key]

        line(f"c={c} output tok/s", lambda r: f"{get(r, 'output_tok_per_s'):,.0f}")
        line(f"c={c} TTFT p50", lambda r: f"{get(r, 'ttft_ms')['p50']:.1f} ms")
        line(
            f"c={c} token gap p50 / p99 / max",
            lambda r: (
                "{p50:.1f} / {p99:.1f} / ".format(**get(r, "token_gap_ms"))
                + f"{get(r, 'token_gap_max_ms')} ms"
            ),
        )
        line(f"c={c} gaps over 100 ms", lambda r: str(get(r, "stalls_over_100ms")))
        line(f"c={c} tokens per event", lambda r: str(get(r, "tokens_per_event")))
        line(
            f"c={c} serving CPU per 1k tokens",
            lambda r: f"{get(r, 'cpu_ms_per_1k_tokens').get('serving', 0):.0f} ms",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--systems",
        nargs="*",
        choices=list(SYSTEMS),
        default=[name for name in SYSTEMS if "chunks/s" not in name],
    )
    parser.add_argument("--concurrency", nargs="*", type=int, default=[1, 16, 64])
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--requests-per-stream", type=int, default=3)
    parser.add_argument("--min-requests", type=int, default=16)
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--profile-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--python", default=".venv/bin/python")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the systems in turn this many times (round k > 1 named '..., round k'); "
        "the JSON's spread gives each figure's median, min and max over the rounds",
    )
    parser.add_argument("--out", default="load_tests/results/serving_cost.json")
    args = parser.parse_args()
    args.concurrency = sorted(args.concurrency)
    rows = {}
    for round_ in range(1, args.rounds + 1):
        for name in args.systems:
            rows[round_name(name, round_)] = measure(name, args)
    result = {
        "conditions": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "workload": f"closed loops, {args.input_len} in / {args.output_len} out, "
            f"ignore_eos, {args.requests_per_stream} requests per client (at least "
            f"{args.min_requests}), random token ids; the client on the same host",
            "concurrency": args.concurrency,
            "idle_s": args.idle_s,
            "serving": "every process group but " + ", ".join(sorted(ENGINE_GROUPS)),
        },
        "systems": rows,
    }
    if args.rounds > 1:
        result["spread"] = {
            name: spread([rows[round_name(name, k)] for k in range(1, args.rounds + 1)])
            for name in args.systems
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print_table(rows)
    if "spread" in result:
        print_spread(result["spread"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
