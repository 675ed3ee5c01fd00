"""Real traffic side by side: a window of the Azure conversation trace replayed open loop
against vLLM's own server and splitserve (colocated and disaggregated), one system at a
time, on the same cores.

    scripts/loopback-netns .venv/bin/python -m load_tests.serving.replay_compare \
        --rate-scales 0.2 0.5 --slo-ttft-ms 2000 --length-scale 0.4 --output-scale 0.5 \
        [--systems vllm colocated default] [--out load_tests/results/replay_compare.json]

(``make bench-replay`` runs it with the 2-vCPU host's rates and SLO.) For each system:
start it, one unmeasured pass of the first ``--warm-duration-s`` of the window at
``--warm-rate-scale``, then one measured pass per ``--rate-scales`` entry, in order;
``--repeats`` measured rounds. Every pass sends prompts of its own (:func:`one_pass`).
Each pass reports what ``splitserve replay`` does: answered, refused (503), TTFT and
TPOT percentiles, SLO attainment, fluidity-index and goodput. vLLM's engine is bound
to core 0 as splitserve's colocated engine is; splitserve disaggregated runs prefill on
core 0 and decode on core 1 (its default config). docs/benchmarks.md reports the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from app.planning.goodput import add_slo_options, slo_from_options
from app.replay.client import replay
from app.replay.report import summary
from app.replay.trace import Window, read_trace, windowed
from load_tests.serving.compare import splitserve
from load_tests.systems.local_app import merge
from load_tests.systems.process_usage import CpuSpent
from load_tests.systems.run_conditions import machine
from load_tests.systems.vllm_server import MAX_MODEL_LEN, vllm_server

SYSTEMS: dict[str, Callable[[dict[str, Any]], AbstractContextManager[str]]] = {
    "vllm": lambda _: vllm_server(),
    "colocated": lambda overrides: splitserve("serve_configs/colocated.yaml", overrides),
    "default": lambda overrides: splitserve("serve_configs/default.yaml", overrides),
}


def setting(text: str) -> dict[str, Any]:
    """``--set decode.max_num_seqs=128`` as the nested override it names (the value read
    as JSON where it is JSON, else as a string)."""
    path, sep, raw = text.partition("=")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected key.path=value")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    for key in reversed(path.split(".")):
        value = {key: value}
    return dict(value)


def one_pass(url: str, window: Window, args: argparse.Namespace, number: int) -> dict[str, Any]:
    """The window at its scales against ``url``: ``splitserve replay``'s summary, and
    the CPU each group of the system's processes used over the pass (% of one core).

    Pass ``number`` sends prompts of its own (seed ``--seed`` + ``number``): with the
    same prompts again, a pass would be served from the prefix cache its predecessor
    filled (a system that answered more of the previous pass then looks faster)."""
    slo, _ = slo_from_options(args)
    requests = windowed(read_trace(), window)
    seed = args.seed + number
    with CpuSpent() as spent:
        answers = asyncio.run(replay(url, "tiny-llama", requests, seed))
    result = summary(answers, window, slo)
    result["prompt_seed"] = seed
    # each request: arrival, status, TTFT and TPOT (ms), so another SLO can be read later
    result["records"] = [
        [
            round(a.at_s, 3),
            a.status if not a.error or a.status != 200 else "error event",
            None if a.ttft_s is None else round(a.ttft_s * 1000, 1),
            None if a.tpot_s is None else round(a.tpot_s * 1000, 2),
        ]
        for a in answers
    ]
    result["cpu_pct"] = {group: round(pct, 1) for group, pct in spent.percent().items()}
    return result


def window_at(
    rate_scale: float, args: argparse.Namespace, duration_s: float | None = None
) -> Window:
    return Window(
        args.start_s,
        duration_s or args.duration_s,
        rate_scale,
        args.length_scale,
        args.output_scale,
        # prompt + answer within the model length every system is started with
        MAX_MODEL_LEN - 256,
    )


def run_system(name: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    row: dict[str, Any] = {"passes": []}
    overrides: dict[str, Any] = {}
    for change in args.set:
        overrides = merge(overrides, change)
    with SYSTEMS[name](overrides) as url:
        row["startup_s"] = round(time.perf_counter() - started, 1)
        if args.warm_rate_scale > 0:
            warm_window = window_at(args.warm_rate_scale, args, args.warm_duration_s)
            warm = one_pass(url, warm_window, args, number=10_000)
            row["warm_pass"] = warm
            print(f"{name}: warm pass x{args.warm_rate_scale:g}: {brief(warm)}", flush=True)
        for repeat in range(args.repeats):
            for index, scale in enumerate(args.rate_scales):
                number = repeat * len(args.rate_scales) + index
                result = one_pass(url, window_at(scale, args), args, number)
                result["repeat"] = repeat
                row["passes"].append(result)
                print(f"{name}: x{scale:g} (round {repeat + 1}): {brief(result)}", flush=True)
    return row


def brief(result: dict[str, Any]) -> str:
    refused = result["statuses"].get("503", 0)
    return (
        f"answered {result['answered']}/{result['requests']}, 503 {refused}, "
        f"TTFT p50/p99 {result['ttft_ms']['p50']}/{result['ttft_ms']['p99']} ms, "
        f"TPOT p50 {result['tpot_ms']['p50']} ms, attainment {result['slo_attainment']}, "
        f"goodput {result['goodput_rps']} req/s; CPU % {result['cpu_pct']}; "
        f"refusals {result['refusals']}"
    )


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    print(
        "| system | rate | round | answered | 503 | TTFT p50 / p99 ms | TPOT p50 ms "
        "| attainment | goodput req/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        for p in row["passes"]:
            print(
                f"| {name} | x{p['window']['rate_scale']:g} | {p['repeat'] + 1} "
                f"| {p['answered']} | {p['statuses'].get('503', 0)} "
                f"| {p['ttft_ms']['p50']} / {p['ttft_ms']['p99']} | {p['tpot_ms']['p50']} "
                f"| {p['slo_attainment']} | {p['goodput_rps']} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", nargs="*", choices=sorted(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--start-s", type=float, default=600.0)
    parser.add_argument("--duration-s", type=float, default=120.0)
    parser.add_argument("--rate-scales", type=float, nargs="+", default=[1.0, 1.3])
    parser.add_argument("--warm-rate-scale", type=float, default=0.6, help="0: no warm pass")
    parser.add_argument(
        "--warm-duration-s", type=float, default=30.0, help="the warm pass's part of the window"
    )
    parser.add_argument("--length-scale", type=float, default=0.4)
    parser.add_argument("--output-scale", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        type=setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a splitserve config override, e.g. model.max_num_seqs=128 (repeatable)",
    )
    parser.add_argument("--out", default="load_tests/results/replay_compare.json")
    add_slo_options(parser, ttft_ms=250.0, tpot_ms=50.0)
    args = parser.parse_args()
    slo_from_options(args)
    rows = {name: run_system(name, args) for name in args.systems}
    conditions = {
        "machine": machine(),
        "window": {"start_s": args.start_s, "duration_s": args.duration_s},
        "length_scale": args.length_scale,
        "output_scale": args.output_scale,
        "warm_rate_scale": args.warm_rate_scale,
        "warm_duration_s": args.warm_duration_s,
        "prompts": "fresh in every pass (seed --seed + pass number), none shared",
        "slo": {"ttft_ms": args.slo_ttft_ms, "tpot_ms": args.slo_tpot_ms},
        "splitserve_overrides": args.set,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"conditions": conditions, "systems": rows}, indent=2))
    print_table(rows)


if __name__ == "__main__":
    main()
