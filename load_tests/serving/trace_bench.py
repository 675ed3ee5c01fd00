"""Where splitting pays, on real traffic and equal hardware: a trace replayed open loop
against five systems in turn, the same two engine cores for each that runs two engines,
each system's goodput under three SLO profiles, and the advisor's prediction beside the
measured winner.

    scripts/loopback-netns .venv/bin/python -m load_tests.serving.trace_bench \
        [--trace FILE] [--out FILE] [--quick] [--systems vllm colocated ...]

(``make bench-trace TRACE=FILE OUT=FILE [QUICK=1]``.) Steps:

1. **Profile the engine** on this machine (``splitserve profile``, core 0, prompts up to
   8,192 tokens) and scale the SLO profiles (:mod:`app.replay.profiles`) by its speed:
   TTFT bounds by its prefill time, TPOT bounds by its decode step, each over the
   reference engine's. Both factors are stated.
2. **Advise**: the simulator's goodput for each layout under each profile, the serving
   path's CPU charged on the host's cores (:mod:`app.planning.trace_advice`), what would
   make splitting win, and from the advice the ladder of rate scales to measure (from
   0.4x the lowest predicted goodput, each rate ``--rate-step`` times the last, to past
   1.5x the highest; ``--rate-scales`` sets it).
3. **Measure**, one system at a time: start it, one unmeasured warm pass, then the
   ladder, lowest rate first, ``--repeats`` times; each pass sends for ``--pass-s`` at
   every rate (at rate scale r, r times as much of the trace; a pass in which fewer than
   ``--min-pass-requests`` arrive, 10, lasts two or four times as long, or is not run:
   with fewer than ten, one late request fails a 90% attainment), with prompts of its own
   (none shares a cached prefix), and a system stops climbing once no profile holds.
   Systems: vLLM's own server (one engine on core 0, the reference); splitserve colocated
   with two engines (one per core); colocated with one engine (core 0); one prefill and
   one decode engine with every prompt remote; and the default app (prompts under its
   ``local_prefill_below_tokens`` prefilled on decode). Every system gets the same
   ``--max-model-len`` (16,384: the trace at its true lengths); splitserve's admission
   a budget that refuses nothing the loosest profile could meet (:func:`admission_budget`).
4. **Report**: each system's goodput per profile (median of the repeats, with min and
   max), the measured winner and its ties beside the advised one (and the advice
   calibrated by the lowest-rate passes), and the sent / answered / failed counts of
   every pass (sent = answered + failed); JSON, a table, and PNG plots
   (:mod:`load_tests.reports.trace_plots`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.config import AppConfig, serve_file_args
from app.host import cpu_model
from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEndCost
from app.planning.trace_advice import advise_trace, calibrated, layouts, what_if
from app.replay.profiles import SloProfile, scaled_profiles, speed_factors
from app.replay.trace import (
    BUILTIN,
    LONGEST_PASS,
    MIN_PASS_REQUESTS,
    TraceRequest,
    Window,
    judged_window,
    read_trace,
    windowed,
)
from load_tests.client.trace_pass import brief, one_pass
from load_tests.reports.trace_report import (
    failed_below_goodput,
    goodput_by_profile,
    print_table,
    verdicts,
)
from load_tests.serving.compare import splitserve
from load_tests.systems.run_conditions import machine
from load_tests.systems.trace_systems import (
    admission_budget,
    fit_cpu,
    frontend_fit_for,
    transport_timeouts,
)
from load_tests.systems.vllm_server import vllm_server

PROFILE_LENGTHS = (16, 64, 128, 256, 512, 1024, 1536, 2048, 4096, 8192)


def systems(
    max_model_len: int, ttft_budget_s: float, loosest_ttft_s: float
) -> dict[str, tuple[str, Callable[[], AbstractContextManager[str]]]]:
    """Each system: the layout the advisor models it as, and how it is started.
    splitserve's admission gets ``ttft_budget_s`` (so that it refuses no request the
    loosest profile would still count as met: vLLM's server refuses nothing), and its
    transport timeouts give up no prefill or transfer the loosest profile would wait for
    (:func:`transport_timeouts`)."""
    model = {
        "model": {"max_model_len": max_model_len},
        "ingress": {"admission": {"ttft_budget_s": ttft_budget_s}},
        "transport": transport_timeouts(loosest_ttft_s),
    }
    remote = {**model, "router": {"local_prefill_below_tokens": 0}}
    return {
        "vllm": ("colocated", lambda: vllm_server(max_model_len=max_model_len)),
        "colocated_two": (
            "colocated_two",
            lambda: splitserve("serve_configs/colocated_two.yaml", model),
        ),
        "colocated": ("colocated", lambda: splitserve("serve_configs/colocated.yaml", model)),
        "remote": ("remote", lambda: splitserve("serve_configs/default.yaml", remote)),
        "default": ("default", lambda: splitserve("serve_configs/default.yaml", model)),
    }


def profile_engine(path: Path, repeats: int) -> EngineProfile:
    """``splitserve profile`` of the colocated config's engine (core 0), in a process of
    its own, written to ``path``."""
    command = [
        sys.executable, "-m", "app.cli", "profile", "--config", "serve_configs/colocated.yaml",
        "--out", str(path), "--repeats", str(repeats),
        "--prompt-lengths", *map(str, PROFILE_LENGTHS),
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return EngineProfile.load(path)


def run_system(
    name: str,
    start: Callable[[], AbstractContextManager[str]],
    window: Callable[[float, float | None], list[TraceRequest]],
    pass_seconds: Callable[[float], float | None],
    rates: list[float],
    profiles: list[SloProfile],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Start the system, warm it, and climb ``rates`` (lowest first) ``--repeats`` times,
    each climb stopping at the first rate where no profile holds."""
    started = time.perf_counter()
    row: dict[str, Any] = {"passes": []}
    with start() as url:
        row["startup_s"] = round(time.perf_counter() - started, 1)
        # The lowest rate whose warm window holds a request (a trace may start quiet).
        warming = next((w for rate in rates if (w := window(rate, args.warm_s))), [])
        warm = one_pass(url, warming, 99_999, profiles, f"{name} warm")
        row["warm_pass"] = {k: warm[k] for k in ("sent", "answered", "failed", "ttft_ms")}
        for repeat in range(args.repeats):
            for index, rate in enumerate(rates):
                seed = args.seed + repeat * 100 + index
                requests = window(rate, None)
                if not requests:  # a quiet stretch of the trace: too few to judge
                    print(
                        f"{name} x{rate:g}: fewer than {args.min_pass_requests} requests "
                        f"arrive in {LONGEST_PASS}x its window: too few to judge, skipped"
                    )
                    continue
                result = one_pass(url, requests, seed, profiles, f"{name} x{rate:g}")
                result.update(rate_scale=rate, repeat=repeat, pass_s=pass_seconds(rate))
                row["passes"].append(result)
                margins = {p: m["margin"] for p, m in result["profiles"].items()}
                print(f"{name} x{rate:g} round {repeat + 1}: {brief(result)}", flush=True)
                if all(m < 0 for m in margins.values()):
                    break  # no profile holds: higher rates would not either
    row["goodput_scale"] = goodput_by_profile(row["passes"], profiles, args.repeats)
    row["wall_s"] = round(time.perf_counter() - started, 1)
    return row


@contextmanager
def _announced(name: str) -> Iterator[None]:
    print(f"--- {name}", flush=True)
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=str(BUILTIN))
    parser.add_argument("--out", default="load_tests/results/trace_bench.json")
    parser.add_argument(
        "--quick", action="store_true", help="passes of 15 s, rates x1.7 apart, 1 repeat"
    )
    parser.add_argument("--systems", nargs="*", help="default: all five")
    parser.add_argument(
        "--start-s",
        type=float,
        help="where passes start in the trace (600; 0 for a trace under 20 minutes)",
    )
    parser.add_argument(
        "--pass-s",
        type=float,
        help="seconds each pass sends for, at every rate (40; quick 15): at rate scale r "
        "a pass replays r times as many seconds of the trace from --start-s",
    )
    parser.add_argument("--warm-s", type=float, default=10.0, help="the warm pass's seconds")
    parser.add_argument("--rate-scales", type=float, nargs="+", help="default: from the advice")
    parser.add_argument(
        "--rate-step", type=float, help="each rate x this the last (1.4; quick 1.7)"
    )
    parser.add_argument("--most-rates", type=int, default=10, help="the ladder's longest")
    parser.add_argument(
        "--frontend",
        default="auto",
        help="the serving path's CPU costs the advisor charges on the engines' cores "
        "(load_tests.planning.frontend_fit's JSON; 'none': free; 'auto': the shipped fit "
        "measured on this CPU model, else the Xeon's, said so)",
    )
    parser.add_argument("--repeats", type=int, help="rounds of the ladder (3; quick 1)")
    parser.add_argument("--length-scale", type=float, default=1.0)
    parser.add_argument("--output-scale", type=float, default=1.0)
    parser.add_argument("--max-model-len", type=int, default=16384)
    parser.add_argument("--engine-profile", help="a `splitserve profile` JSON to use instead")
    parser.add_argument(
        "--min-pass-requests",
        type=int,
        default=MIN_PASS_REQUESTS,
        help="a pass in which fewer arrive lasts 2x or 4x --pass-s, or is not run: with "
        "fewer than 10, one late request fails a 90%% attainment",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # A SIGTERM ends the run as Ctrl-C does: the system under test is stopped on the way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.pass_s = args.pass_s or (15.0 if args.quick else 40.0)
    args.repeats = args.repeats or (1 if args.quick else 2)
    step = args.rate_step or (1.7 if args.quick else 1.4)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    with _announced("engine profile"):
        if args.engine_profile:
            profile = EngineProfile.load(args.engine_profile)
        else:
            profile = profile_engine(out.with_suffix(".engine.json"), 1 if args.quick else 3)
    prefill_1k_s = profile.prefill_s(1024)
    factors = speed_factors(prefill_1k_s, profile.decode_step_s(1))
    profiles = scaled_profiles(factors)
    rows_all = read_trace(args.trace)
    trace_s = rows_all[-1][0] if rows_all else 0.0
    args.start_s, fill = start_and_fill(trace_s, args.start_s, args.pass_s)
    highest = min(20.0, fill)  # the advisor's ladder

    judged: dict[float, Window | None] = {}

    def judged_pass(rate: float) -> Window | None:
        if rate not in judged:
            judged[rate] = judged_window(
                rows_all, pass_window(1.0, args.pass_s), rate, args.min_pass_requests
            )
        return judged[rate]

    def window(rate: float, pass_s: float | None) -> list[TraceRequest]:
        """A pass at ``rate`` lasting ``pass_s``, or by default ``--pass-s``: ``rate``
        times as many seconds of the trace from ``--start-s``, so that every pass loads
        the system for as long, and a rate it cannot sustain shows as a growing queue. A
        default pass in which fewer than ``--min-pass-requests`` arrive lasts twice or
        four times as long (none: too few to judge, and no request)."""
        if pass_s is not None:
            return windowed(rows_all, pass_window(rate, pass_s))
        found = judged_pass(rate)
        return windowed(rows_all, found) if found is not None else []

    def pass_seconds(rate: float) -> float | None:
        found = judged_pass(rate)
        return round(found.duration_s / rate, 3) if found is not None else None

    def pass_window(rate: float, pass_s: float) -> Window:
        return Window(
            args.start_s,
            pass_s,
            1.0,
            args.length_scale,
            args.output_scale,
            args.max_model_len - 1024,
        ).at_rate(rate)

    if not window(1.0, args.pass_s):
        raise SystemExit(f"no request of {args.trace} arrives from {args.start_s} s")
    default_app = AppConfig.model_validate(serve_file_args("serve_configs/default.yaml"))
    local_below = default_app.router.local_prefill_below_tokens
    if args.frontend == "auto":
        cpu = cpu_model()
        fit, matched = frontend_fit_for(cpu)
        args.frontend = str(fit)
        if not matched:
            print(
                f"no shipped front-end fit was measured on a {cpu}: the advisor "
                f"charges {args.frontend}'s ({fit_cpu(fit)}); `make bench-frontend-fit` "
                "measures this machine's (--frontend FILE)",
                flush=True,
            )
    with _announced("advice (simulated)"):
        frontend = None if args.frontend == "none" else FrontEndCost.from_fit(args.frontend)
        candidates = layouts(
            local_below,
            # the replay client runs here too: its CPU is charged with the serving path's
            frontend=frontend.with_client() if frontend else None,
            cores=os.cpu_count() or 1,
        )
        advice = advise_trace(
            lambda rate: window(rate, None), profile, profiles, candidates, highest=highest
        )
    print(json.dumps(advice["advised_winner"]), flush=True)
    with _announced("what would make splitting win (simulated)"):
        scenarios = what_if(
            lambda rate: window(rate, None), profile, profiles, local_below, frontend, highest
        )
    for scenario, found in scenarios.items():
        print(f"{scenario}: {json.dumps(found['advised_winner'])}", flush=True)
    wanted = sorted(args.rate_scales or advised_ladder(advice, step, args.most_rates))
    rates = within(wanted, fill)
    if len(rates) < len(wanted):
        print(
            f"the trace lasts {trace_s:.0f} s: rate scales above {fill:.2f} would run out "
            f"of it in a pass of {args.pass_s:g} s from {args.start_s:g} s, and are left out",
            flush=True,
        )
    loosest_ttft_s = max(p.ttft_s for p in profiles)
    admission_budget_s = admission_budget(loosest_ttft_s)
    chosen = systems(args.max_model_len, admission_budget_s, loosest_ttft_s)
    names = args.systems or list(chosen)
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        layout, start = chosen[name]
        with _announced(name):
            rows[name] = {
                "layout": layout,
                **run_system(name, start, window, pass_seconds, rates, profiles, args),
            }
    # The advisor again, each layout's serving-path time per request set from the
    # lowest-rate passes (their TTFT median less the simulated one): what a low load
    # shows of the path, which the engine profile cannot hold.
    lowest = rates[0]
    measured_p50: dict[str, float] = {}
    for name, row in rows.items():
        firsts = [p["ttft_ms"]["p50"] for p in row["passes"] if p["rate_scale"] == lowest]
        firsts = [f for f in firsts if f is not None]
        if firsts:
            layout = chosen[name][0]
            value = statistics.median(firsts) / 1000
            measured_p50[layout] = min(measured_p50.get(layout, value), value)
    recalibrated = calibrated(candidates, measured_p50, window(lowest, None), profile)
    with _announced("advice, calibrated by the lowest-rate passes (simulated)"):
        advice_calibrated = advise_trace(
            lambda rate: window(rate, None), profile, profiles, recalibrated, highest=highest
        )
        advice_calibrated["overhead_s"] = {a.name: round(a.overhead_s, 4) for a in recalibrated}
    result = {
        "conditions": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "trace": str(args.trace),
            "window_at_rate_1": pass_window(1.0, args.pass_s).stated(),
            "pass_s": args.pass_s,
            "passes": "at rate scale r, r x pass_s seconds of the trace from start_s; "
            "a pass in which fewer than min_pass_requests arrive lasts 2x or 4x as long, "
            "or is not run (each pass states its pass_s)",
            "min_pass_requests": args.min_pass_requests,
            "pass_s_by_rate": {str(rate): pass_seconds(rate) for rate in rates},
            "trace_s": round(trace_s, 1),
            "highest_rate_the_trace_fills": round(fill, 3),
            "rate_scales_left_out": [rate for rate in wanted if rate not in rates],
            "prompts_capped_at_top_rate": sum(
                r[1] > args.max_model_len - 1024
                for r in rows_all
                if args.start_s <= r[0] < args.start_s + args.pass_s * max(rates)
            ),
            "max_model_len": args.max_model_len,
            "rate_scales": rates,
            "repeats": args.repeats,
            "quick": args.quick,
            "warm_s": args.warm_s,
            "prefill_1k_s": round(prefill_1k_s, 4),
            "advisor_frontend": args.frontend,
            "advisor_frontend_cpu": None
            if args.frontend == "none"
            else fit_cpu(Path(args.frontend)),
            "splitserve_admission_ttft_budget_s": admission_budget_s,
            "splitserve_transport_timeouts": transport_timeouts(loosest_ttft_s),
            "speed_factors": factors.stated(),
            "profiles": [p.stated() for p in profiles],
            "engine_profile": {
                "prefill": profile.prefill,
                "decode": profile.decode,
                "decode_context": profile.decode_context,
                "decode_context_token_s": profile.decode_context_token_s,
                "crowded_prefill": profile.crowded_prefill,
                "crowded_decode": profile.crowded_decode,
            },
            "wall_s": None,
        },
        "advice": advice,
        "advice_calibrated": advice_calibrated,
        "what_if": scenarios,
        "systems": rows,
        "profiles": verdicts(
            rows, {n: chosen[n][0] for n in rows}, advice, advice_calibrated, profiles
        ),
        "failed_below_goodput": failed_below_goodput(rows),
    }
    result["conditions"]["wall_s"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=2))
    print_table(result)
    from load_tests.reports.trace_plots import draw

    for path in draw(result, out.parent / f"{out.stem}_plots"):
        print(f"plot: {path}")
    print(f"written: {out}")


def start_and_fill(trace_s: float, start_s: float | None, pass_s: float) -> tuple[float, float]:
    """Where passes start (``start_s``; default 600 s in, or 0 in a trace under 20
    minutes) and the highest rate scale whose pass the trace fills: a pass at rate scale
    r replays r x ``pass_s`` seconds of it, and past that rate would run out of trace and
    send less than the rate says."""
    start = start_s if start_s is not None else (600.0 if trace_s >= 1200 else 0.0)
    return start, max(trace_s - start, 0.0) / pass_s


def within(rates: list[float], fill: float) -> list[float]:
    """The rates whose passes the trace fills (at least the lowest, to measure something)."""
    return [rate for rate in rates if rate <= fill] or rates[:1]


def advised_ladder(advice: dict[str, Any], step: float, most: int) -> list[float]:
    """Rate scales from 0.4x the lowest goodput the advisor predicts, each ``step`` times
    the last, to past 1.5x the highest (at most ``most``): each system climbs them until
    no profile holds."""
    predicted = [
        g for row in advice["layouts"].values() for g in row["goodput_scale"].values() if g > 0
    ]
    low, high = (0.4 * min(predicted), 1.5 * max(predicted)) if predicted else (0.1, 10.0)
    rates = [round(low, 3)]
    while rates[-1] < high and len(rates) < most:
        rates.append(round(rates[-1] * step, 3))
    return rates


if __name__ == "__main__":
    main()
