"""Hold the planner to measurements: predicted vs measured goodput of the tested configs.

    .venv/bin/python -m load_tests.planning.planner_check \
        --profile load_tests/results/engine_profile.json \
        --compare load_tests/results/compare.json

Reads an engine profile (``splitserve profile``) and a side-by-side result
(``load_tests.serving.compare``, with goodput), derives the serving path's per-request overheads
from the measured concurrency-1 TTFTs and its CPU per streamed token from the c=16 TPOT
(what the engine profile cannot see), then predicts
the goodput of the configs that were measured, on the same mix and SLO: splitserve
disaggregated (1 prefill + 1 decode engine, prompts under 512 tokens prefilled on
decode), the same with every prompt remote, and splitserve colocated (one engine).
Prints and writes the comparison (docs/planner.md quotes it). Where the compare run
recorded where its requests missed at each rate tried (``goodput_breakdown``), it prints
the model's misses at the same rates beside them: which target, and which requests
(short prompts or long), the model gets wrong.

With ``--frontend`` (a :mod:`load_tests.planning.frontend_fit` result, from a run of its own), it
also predicts with the front-end model: the serving path as a CPU server that every
request and chunk visits, on the cores it shares with the engines (disaggregated: two
engines on two cores; colocated: one engine on one core, the front end on the other),
the per-request overheads then holding only what is not that CPU. The load generator's
own CPU (fitted by the same run) is added to that server: its clients share the cores.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.planning.engine_profile import EngineProfile, interpolate, spread_from_quantiles
from app.planning.frontend import FrontEndCost
from app.planning.goodput import SLO, misses, requests_at
from app.planning.mix import DEFAULT_MIX, mix_lengths, parse_mix
from app.planning.planner import goodput
from app.planning.simulator import Topology, poisson_arrivals, simulate

CORES = 2  # the machine's cores, engines and front end together

MEASURED = {
    "splitserve disaggregated": Topology(1, 1, local_prefill_below_tokens=512),
    "splitserve colocated": Topology(0, 1),
    "splitserve disaggregated, every prompt remote": Topology(1, 1),
}


def token_overhead(profile: EngineProfile, row: dict[str, Any]) -> float:
    """Serving-path seconds per streamed token: c=16 TPOT beyond the engine's own step."""
    engine_step = interpolate(profile.decode, 16)
    tpot = float(row["c16"]["tpot_ms"]["p50"]) / 1000
    return max(tpot - engine_step, 0.0) / 16


def spread(rows: dict[str, Any]) -> float:
    """The path's per-request spread (an exponential tail's mean) from the colocated
    c=1 TTFT's p50 and p95."""
    ttft = rows["splitserve colocated"]["c1"]["ttft_ms"]
    return spread_from_quantiles(ttft["p50"] / 1000, ttft["p95"] / 1000)[1]


def overheads(
    profile: EngineProfile, rows: dict[str, Any], cost: FrontEndCost | None = None
) -> tuple[float, float]:
    """(colocated, extra disaggregated) path overhead from the c=1 TTFT medians (less
    the median of the profile's spread); with a front-end model, less the CPU it charges
    a lone request itself."""
    engine_ttft = profile.prefill_s(128) + profile.decode_step_s(1)
    engine_ttft += profile.overhead_spread_s * math.log(2)
    colocated = rows["splitserve colocated"]["c1"]["ttft_ms"]["p50"] / 1000
    remote = rows["splitserve disaggregated, every prompt remote"]["c1"]["ttft_ms"]["p50"] / 1000
    # A lone request's first token: one step (its prefill) and one chunk; a remote one
    # adds the prefill hop and the prefill engine's step.
    total = cost.total() if cost else None
    cpu = total.request_s + total.step_s + total.chunk_s if total else 0.0
    remote_cpu = total.remote_request_s + total.step_s if total else 0.0
    base = max(colocated - engine_ttft - cpu, 0.0)
    # A remote prefill adds the decode engine's first step and the hops to both pools.
    extra = max(remote - engine_ttft - cpu - base - profile.decode_step_s(1) - remote_cpu, 0.0)
    return base, extra


def by_rate(
    profile: EngineProfile,
    topology: Topology,
    lengths: list[tuple[int, int]],
    slo: SLO,
    measured: list[dict[str, Any]],
    seeds: int = 3,
) -> list[dict[str, Any]]:
    """At each rate the measured goodput search tried, where the model's requests miss
    the SLO next to where the measured ones did (short prompts and long ones apart)."""
    rows = []
    for point in sorted(measured, key=lambda p: p["rate"]):
        rate = point["rate"]
        count = requests_at(rate, 60.0, len(lengths))
        workload = [lengths[i % len(lengths)] for i in range(count)]
        outcomes = [
            (prompt, outcome)
            for seed in range(seeds)
            for (prompt, _), outcome in zip(
                workload,
                simulate(poisson_arrivals(rate, workload, seed), profile, topology),
                strict=True,
            )
        ]
        model = {
            kind: misses([o for prompt, o in outcomes if (prompt <= 128) == short], slo)
            for kind, short in (("short", True), ("long", False))
        }
        rows.append({"rate": rate, "measured": point, "model": model})
        for kind in ("short", "long"):
            got, want = model[kind], point[kind]
            print(
                f"  {rate:6.2f} req/s {kind:<5}"
                f"  over TTFT {want['over_ttft']:.2f}/{got['over_ttft']:.2f}"
                f"  over TPOT {want['over_tpot']:.2f}/{got['over_tpot']:.2f}"
                f"  TTFT p90 {want['ttft_p90_ms']}/{got['ttft_p90_ms']} ms"
                f"  TPOT p90 {want['tpot_p90_ms']}/{got['tpot_p90_ms']} ms  (measured/model)"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="load_tests/results/engine_profile.json")
    parser.add_argument("--compare", default="load_tests/results/compare.json")
    parser.add_argument("--mix", default=DEFAULT_MIX)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--frontend", help="a load_tests.planning.frontend_fit result")
    parser.add_argument(
        "--spread",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="draw each request's path overhead from a tail fitted to the c=1 TTFT's "
        "p50 and p95 (--no-spread: its median, a constant)",
    )
    parser.add_argument("--out", default="load_tests/results/planner_check.json")
    args = parser.parse_args()
    profile = EngineProfile.load(args.profile)
    compare = json.loads(Path(args.compare).read_text())
    rows, conditions = compare["rows"], compare["conditions"]
    if args.spread:
        profile.overhead_spread_s = spread(rows)
    profile.overhead_s, profile.disaggregated_overhead_s = overheads(profile, rows)
    lengths = mix_lengths(parse_mix(args.mix), args.requests, seed=0)
    ttft_s, tpot_s = conditions["slo_ttft_ms"] / 1000, conditions["slo_tpot_ms"] / 1000
    result: dict[str, Any] = {
        "slo_ms": [conditions["slo_ttft_ms"], conditions["slo_tpot_ms"]],
        "mix": args.mix,
        "overhead_ms": round(profile.overhead_s * 1000, 2),
        "overhead_spread_ms": round(profile.overhead_spread_s * 1000, 2),
        "disaggregated_overhead_ms": round(profile.disaggregated_overhead_s * 1000, 2),
        "systems": {},
        "measured_conditions": conditions,
    }
    fitted = FrontEndCost.from_fit(args.frontend) if args.frontend else None
    # The load tests' clients ran on the same two cores: their CPU is charged too.
    cost = fitted.with_client() if fitted else None
    modelled = replace(profile, token_overhead_s=0.0)
    if fitted is not None and cost is not None:
        modelled.overhead_s, modelled.disaggregated_overhead_s = overheads(profile, rows, cost)
        result["frontend"] = {
            "request_ms": round(fitted.request_s * 1000, 3),
            "remote_request_ms": round(fitted.remote_request_s * 1000, 3),
            "chunk_ms": round(fitted.chunk_s * 1000, 3),
            "step_ms": round(fitted.step_s * 1000, 3),
            "client_request_ms": round(fitted.client_request_s * 1000, 3),
            "client_chunk_ms": round(fitted.client_chunk_s * 1000, 3),
            "overhead_ms": round(modelled.overhead_s * 1000, 2),
            "disaggregated_overhead_ms": round(modelled.disaggregated_overhead_s * 1000, 2),
        }
    for name, topology in MEASURED.items():
        if name not in rows:
            continue
        measured = rows[name].get("goodput_req_per_s")
        profile.token_overhead_s = token_overhead(profile, rows[name])
        predicted = goodput(profile, topology, lengths, ttft_s, tpot_s).goodput
        error = (predicted - measured) / measured if measured else None
        system: dict[str, Any] = {
            "topology": topology.name,
            "token_overhead_ms": round(profile.token_overhead_s * 1000, 3),
            "predicted_req_per_s": round(predicted, 2),
            "measured_req_per_s": measured,
            "error": None if error is None else round(error, 3),
        }
        print(f"{name:<28} predicted {predicted:6.2f}  measured {measured}  error {error}")
        if cost is not None:
            shared = replace(topology, frontend=cost, cores=CORES)
            with_cpu = goodput(modelled, shared, lengths, ttft_s, tpot_s).goodput
            error = (with_cpu - measured) / measured if measured else None
            system["frontend_model"] = {
                "predicted_req_per_s": round(with_cpu, 2),
                "error": None if error is None else round(error, 3),
            }
            print(f"{'':<28} with the front end: {with_cpu:6.2f}  error {error}")
        if rows[name].get("goodput_breakdown"):
            chosen = replace(topology, frontend=cost, cores=CORES) if cost else topology
            system["by_rate"] = by_rate(
                modelled if cost else profile,
                chosen,
                lengths,
                SLO(ttft_s, tpot_s),
                rows[name]["goodput_breakdown"],
            )
        result["systems"][name] = system
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
