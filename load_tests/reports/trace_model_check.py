"""How far the advisor's model was off, pass by pass: each measured pass of a finished
trace benchmark beside the simulator's run of the same requests on the same layout
(its TTFT and TPOT percentiles, each profile's measure, and a bound on the KV cache it
held), so that a goodput the model over- or under-predicts is traced to the figure it
gets wrong: the queue before the first token, the decode speed, the requests refused,
or a KV cache the engines would have run out of (they preempt; the model does not).

    .venv/bin/python -m load_tests.reports.trace_model_check RESULT.json \
        [--frontend FIT.json] [--engine-profile ENGINE.json] [--trace FILE] [--out FILE]

The engine profile, front-end fit and trace are found as ``trace_readvise`` finds them
(the run's own unless given). Only the first repeat's passes are compared (a repeat
sends the same requests; the model gives the same answer). vLLM's server is simulated
with its own sequence limit (:data:`ENGINE_MAX_NUM_SEQS`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.config import AppConfig, serve_file_args
from app.planning.engine_profile import EngineProfile
from app.planning.kv_size import shape_from_model
from app.planning.trace_advice import Layout, simulated_streams
from app.replay.profiles import SloProfile, ttft_tpot
from app.replay.report import percentiles_ms
from app.replay.trace import TraceRequest
from load_tests.reports.trace_readvise import (
    finished_run,
    layouts_as_run,
    passes_of,
    profiles_as_run,
)

# Where a system's engine runs with other limits than the layout it is compared as: vLLM's
# API server on a CPU host defaults to 128 sequences a step (its OPENAI_API_SERVER batch
# defaults), splitserve's engines run ``model.max_num_seqs`` (64).
ENGINE_MAX_NUM_SEQS: dict[str, int] = {"vllm": 128}


def simulated_pass(
    requests: Sequence[TraceRequest],
    profile: EngineProfile,
    layout: Layout,
    slo_profiles: Sequence[SloProfile],
) -> dict[str, Any]:
    """The figures a pass reports (``ttft_ms``, ``tpot_ms``, each profile's measures and
    margin), read off the simulator's run of its requests."""
    streams = simulated_streams(requests, profile, layout)
    outcomes = [ttft_tpot(times) for times, _ in streams]
    ttfts = [ttft for ttft, _ in outcomes if ttft is not None]
    tpots = [tpot for _, tpot in outcomes if tpot is not None]
    found: dict[str, Any] = {
        "sent": len(requests),
        "kv_tokens_peak_bound": kv_tokens_peak_bound(requests, streams),
        "ttft_ms": percentiles_ms(ttfts),
        "tpot_ms": percentiles_ms(tpots),
        "profiles": {},
    }
    for p in slo_profiles:
        measures = p.measures(streams)
        found["profiles"][p.name] = {**measures, "margin": round(p.margin(measures), 4)}
    return found


def kv_tokens_peak_bound(
    requests: Sequence[TraceRequest], streams: Sequence[tuple[Sequence[float], int]]
) -> int:
    """At most how many tokens of KV cache the pass held at once, all engines together:
    each request counted at its whole length (prompt and every output token) from its
    first token to its last. Above an engine's capacity the engine would preempt, which
    the model does not; below it, preemption cannot have happened in the model's run."""
    edges: list[tuple[float, int]] = []
    for request, (times, _) in zip(requests, streams, strict=True):
        if times:
            tokens = request.prompt_tokens + request.output_tokens
            start = request.at_s + times[0]
            edges += [(start, tokens), (request.at_s + times[-1] + 1e-9, -tokens)]
    held = peak = 0
    for _, change in sorted(edges):
        held += change
        peak = max(peak, held)
    return peak


def kv_capacity_tokens() -> int:
    """Tokens of KV cache one engine of the default app holds on a CPU host
    (``model.kv_cache_gib`` over the model's bytes per token)."""
    app = AppConfig.model_validate(serve_file_args("serve_configs/default.yaml"))
    shape = shape_from_model(app.model.source)
    return app.model.kv_cache_gib * 2**30 // shape.bytes_per_token()


def ratio(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured, or None where either is missing or the measure is 0."""
    if predicted is None or not measured:
        return None
    return round(predicted / measured, 3)


def compare(
    result: dict[str, Any],
    profile: EngineProfile,
    candidates: Sequence[Layout],
    requests_at: Callable[[float], list[TraceRequest]],
    slo_profiles: Sequence[SloProfile],
) -> dict[str, Any]:
    """Each system's first-repeat passes, measured beside predicted, and per system the
    geometric mean of the predicted-to-measured ratios of TTFT p50 and TPOT p50."""
    by_name = {layout.name: layout for layout in candidates}
    found: dict[str, Any] = {}
    for name, row in result["systems"].items():
        layout = by_name[row["layout"]]
        if name in ENGINE_MAX_NUM_SEQS:
            topology = replace(layout.topology, max_num_seqs=ENGINE_MAX_NUM_SEQS[name])
            layout = replace(layout, topology=topology)
        passes = []
        for measured in row["passes"]:
            if measured.get("repeat", 0) != 0:
                continue
            rate = measured["rate_scale"]
            predicted = simulated_pass(requests_at(rate), profile, layout, slo_profiles)
            passes.append(
                {
                    "rate_scale": rate,
                    "measured": {
                        key: measured[key]
                        for key in ("sent", "failed", "statuses", "ttft_ms", "tpot_ms")
                    }
                    | {"profiles": measured["profiles"]},
                    "predicted": predicted,
                    "ttft_p50_ratio": ratio(
                        predicted["ttft_ms"]["p50"], measured["ttft_ms"]["p50"]
                    ),
                    "tpot_p50_ratio": ratio(
                        predicted["tpot_ms"]["p50"], measured["tpot_ms"]["p50"]
                    ),
                }
            )
        found[name] = {
            "layout": row["layout"],
            "ttft_p50_ratio_geomean": geomean([p["ttft_p50_ratio"] for p in passes]),
            "tpot_p50_ratio_geomean": geomean([p["tpot_p50_ratio"] for p in passes]),
            "passes": passes,
        }
    return found


def geomean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v]
    if not present:
        return None
    return round(statistics.geometric_mean(present), 3)


def print_check(check: dict[str, Any], slo_profiles: Sequence[SloProfile]) -> None:
    names = [p.name for p in slo_profiles]
    print(
        "| system | rate | sent | failed | TTFT p50 meas / pred (ms) | TTFT p99 meas / pred "
        "| TPOT p50 meas / pred (ms) | KV tokens held, bound (pred) | "
        + " | ".join(f"{n} margin meas / pred" for n in names)
        + " |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(names))
    for system, row in check.items():
        for p in row["passes"]:
            m, s = p["measured"], p["predicted"]
            margins = " | ".join(
                f"{m['profiles'][n]['margin']:+.2f} / {s['profiles'][n]['margin']:+.2f}"
                for n in names
            )
            print(
                f"| {system} | {p['rate_scale']} | {m['sent']} | {m['failed']} "
                f"| {m['ttft_ms']['p50']} / {s['ttft_ms']['p50']} "
                f"| {m['ttft_ms']['p99']} / {s['ttft_ms']['p99']} "
                f"| {m['tpot_ms']['p50']} / {s['tpot_ms']['p50']} "
                f"| {s['kv_tokens_peak_bound']:,} | {margins} |"
            )
        print(
            f"| {system}: predicted / measured, geometric mean | | | "
            f"| TTFT p50 x{row['ttft_p50_ratio_geomean']} | "
            f"| TPOT p50 x{row['tpot_p50_ratio_geomean']} | |" + " |" * len(names)
        )


def main() -> None:
    run = finished_run(__doc__.split("\n\n")[0], "_model_check")
    args, path, fit = run.args, run.path, run.fit
    slo_profiles = profiles_as_run(run.result)
    check = compare(
        run.result,
        run.profile,
        layouts_as_run(run.result, run.frontend),
        passes_of(run.result, run.trace),
        slo_profiles,
    )
    capacity = kv_capacity_tokens()
    out = Path(args.out or path.with_name(f"{path.stem}_model_check.json"))
    out.write_text(
        json.dumps(
            {
                "result": str(path),
                "frontend": fit,
                "engine_profile": args.engine_profile or "the run's",
                "kv_capacity_tokens_per_engine": capacity,
                "systems": check,
            },
            indent=2,
        )
    )
    print_check(check, slo_profiles)
    print(f"KV cache of one engine: {capacity:,} tokens (the default app's model, CPU host)")
    print(f"written: {out}", flush=True)


if __name__ == "__main__":
    main()
