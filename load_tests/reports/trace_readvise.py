"""The advice of a finished trace benchmark, worked out again: the same trace window,
engine profile and measured goodput, the advisor's model as it is now and the front-end
fit given, so that a change of the model (or a fit from the right machine) is checked
against runs already made without running them again.

    .venv/bin/python -m load_tests.reports.trace_readvise RESULT.json \
        [--frontend FIT.json] [--engine-profile ENGINE.json] [--trace FILE] [--out FILE]

The engine profile is the run's own (``RESULT``'s ``.engine.json`` beside it where it
is there, which holds the crowded factors; else the curves in its conditions). The result
gets ``advice`` and ``profiles`` (the verdicts) anew; what the run itself advised is
kept under ``advice_as_run`` and ``profiles_as_run``, and ``advice_recomputed`` says with
what. The calibrated advice is the run's (it needs the lowest-rate passes' model, which
this does not redo).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import AppConfig, serve_file_args
from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEndCost
from app.planning.trace_advice import Layout, advise_trace, layouts
from app.replay.profiles import SloProfile
from app.replay.trace import (
    BUILTIN,
    LONGEST_PASS,
    TraceRequest,
    Window,
    judged_window,
    read_trace,
    windowed,
)
from load_tests.reports.trace_report import print_table, verdicts


def engine_profile(result_path: Path, result: dict[str, Any], given: str | None) -> EngineProfile:
    """The profile given, else the run's ``.engine.json``, else its conditions' curves."""
    beside = result_path.with_suffix(".engine.json")
    if given or beside.exists():
        return EngineProfile.load(given or beside)
    stated = result["conditions"]["engine_profile"]
    return EngineProfile(
        prefill=[(float(t), float(s)) for t, s in stated["prefill"]],
        decode=[(float(b), float(s)) for b, s in stated["decode"]],
        decode_context=stated["decode_context"],
        decode_context_token_s=stated["decode_context_token_s"],
        crowded_prefill=stated.get("crowded_prefill", 1.0),
        crowded_decode=stated.get("crowded_decode", 1.0),
    )


def trace_of(stated: str, given: str | None) -> Path:
    """The trace given, else the run's where it still is, else the shipped one of its name."""
    if given:
        return Path(given)
    if Path(stated).exists():
        return Path(stated)
    return BUILTIN.parent / Path(stated).name


def fit_of(result: dict[str, Any], given: str | None) -> tuple[str, FrontEndCost | None]:
    """The front-end fit given, else the run's (found under docs/results where the run was
    made from a clone); 'none': the serving path free."""
    fit = given or result["conditions"].get("advisor_frontend") or "none"
    if fit != "none" and not Path(fit).exists():
        fit = str(Path("docs/results") / Path(fit).name)
    return fit, None if fit == "none" else FrontEndCost.from_fit(fit)


def _profile(stated: dict[str, Any]) -> SloProfile:
    """A profile as a result states it (bounds in ms, to 0.1 ms)."""
    return SloProfile(
        name=stated["name"],
        ttft_s=stated["ttft_ms"] / 1000,
        tpot_s=stated["tpot_ms"] / 1000,
        measure=stated["measure"],
        target=stated["target"],
        promise=stated["promise"],
    )


def passes_of(result: dict[str, Any], trace: Path) -> Callable[[float], list[TraceRequest]]:
    """The requests a pass of ``result``'s run sent at a rate scale (its window at rate 1,
    sped up as the run sped it)."""
    at_one = Window(**result["conditions"]["window_at_rate_1"])
    rows_all = read_trace(trace)
    # Runs before passes were lengthened state no minimum: their passes were as long as
    # the window says, however few requests arrived.
    least = result["conditions"].get("min_pass_requests", 0)

    def window(rate: float) -> list[TraceRequest]:
        found = judged_window(rows_all, at_one, rate, least, LONGEST_PASS if least else 1)
        return windowed(rows_all, found) if found is not None else []

    return window


def layouts_as_run(result: dict[str, Any], frontend: FrontEndCost | None) -> list[Layout]:
    """The layouts the run's advisor compared: the default app's local-prefill threshold,
    the fit given (the replay client's process included), the run's cores."""
    default_app = AppConfig.model_validate(serve_file_args("serve_configs/default.yaml"))
    return layouts(
        default_app.router.local_prefill_below_tokens,
        frontend=frontend.with_client() if frontend else None,
        cores=result["conditions"]["machine"]["cpus"],
    )


def profiles_as_run(result: dict[str, Any]) -> list[SloProfile]:
    return [_profile(p) for p in result["conditions"]["profiles"]]


def readvise(
    result: dict[str, Any], profile: EngineProfile, trace: Path, frontend: FrontEndCost | None
) -> dict[str, Any]:
    """``result`` with its advice and verdicts worked out again."""
    conditions = result["conditions"]
    profiles = profiles_as_run(result)
    window = passes_of(result, trace)
    candidates = layouts_as_run(result, frontend)
    highest = min(20.0, conditions["highest_rate_the_trace_fills"])
    advice = advise_trace(window, profile, profiles, candidates, highest=highest)
    rows = result["systems"]
    layout_of = {name: row["layout"] for name, row in rows.items()}
    again = dict(result)
    again.setdefault("advice_as_run", result["advice"])
    again.setdefault("profiles_as_run", result["profiles"])
    again["advice"] = advice
    again["profiles"] = verdicts(rows, layout_of, advice, result["advice_calibrated"], profiles)
    return again


@dataclass(frozen=True)
class FinishedRun:
    """A finished trace benchmark as the reports that work on it read it: the result, the
    front-end fit, engine profile and trace (the run's own unless given), the options."""

    path: Path
    result: dict[str, Any]
    fit: str
    frontend: FrontEndCost | None
    profile: EngineProfile
    trace: Path
    args: argparse.Namespace


def finished_run(description: str, out_suffix: str) -> FinishedRun:
    """The command line of a report on a finished run (``RESULT.json``, ``--frontend``,
    ``--engine-profile``, ``--trace``, ``--out``: default ``RESULT`` with ``out_suffix``
    before .json), and the run it names."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("result", help="a load_tests.serving.trace_bench JSON")
    parser.add_argument("--frontend", help="a front-end fit (default: the run's); 'none': free")
    parser.add_argument("--engine-profile", help="default: the run's")
    parser.add_argument("--trace", help="default: the run's, or the shipped one of its name")
    parser.add_argument("--out", help=f"default: RESULT with {out_suffix} before .json")
    args = parser.parse_args()
    path = Path(args.result)
    result = json.loads(path.read_text())
    fit, frontend = fit_of(result, args.frontend)
    return FinishedRun(
        path=path,
        result=result,
        fit=fit,
        frontend=frontend,
        profile=engine_profile(path, result, args.engine_profile),
        trace=trace_of(result["conditions"]["trace"], args.trace),
        args=args,
    )


def main() -> None:
    run = finished_run(__doc__.split("\n\n")[0], "_readvised")
    args, path = run.args, run.path
    fit = run.fit
    again = readvise(run.result, run.profile, run.trace, run.frontend)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    again["advice_recomputed"] = {
        "commit": commit or None,
        "frontend": fit,
        "engine_profile": args.engine_profile or "the run's",
        "why": "the advice worked out again by load_tests.reports.trace_readvise; the "
        "run's own is under advice_as_run and profiles_as_run",
    }
    out = Path(args.out or path.with_name(f"{path.stem}_readvised.json"))
    out.write_text(json.dumps(again, indent=2))
    print_table(again)
    print(f"written: {out}", flush=True)


if __name__ == "__main__":
    main()
