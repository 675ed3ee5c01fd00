"""Which layout won a measured side-by-side run, and why, from its own figures.

``splitserve advise --result`` reads what ``make bench-compare`` (``load_tests.serving.compare``)
writes: per system, the goodput on the mixed load at the run's SLO (the highest rate at
which the target share of requests met both the TTFT and the TPOT target), and the
figures behind it. :func:`verdict` names the system with the highest goodput and says,
for each other system, how far behind it was and where its requests missed at the
lowest rate it failed (over the TTFT target, over the TPOT target, failed outright),
next to the latencies and throughput measured without a rate sweep. A run without
goodput (``--no-goodput``) is ranked by the mixed load's short-request TTFT p99, and the
verdict says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Measured:
    """One system's figures in a compare run (ms unless named otherwise)."""

    name: str
    goodput_req_per_s: float | None
    c1_ttft_p50: float
    c1_tpot_p50: float
    c16_tok_per_s: float
    mixed_ttft_p99: float
    mixed_tpot_p50: float
    mixed_itl_p99: float
    idle_cpu_pct: float
    pss_mib: float
    first_miss: dict[str, Any] | None  # where it missed at the lowest rate it failed


def is_compare_result(data: Any) -> bool:
    """Whether ``data`` is what ``load_tests.serving.compare`` writes."""
    return isinstance(data, dict) and isinstance(data.get("rows"), dict) and bool(data["rows"])


def measured(name: str, row: dict[str, Any], target: float) -> Measured:
    """The figures of one compare row (KeyError names what a row lacks)."""
    goodput = row.get("goodput_req_per_s")
    failed_rates = sorted(rate for rate, share in row.get("goodput_tried", []) if share < target)
    first_miss = None
    if failed_rates:
        lowest = failed_rates[0]
        first_miss = next(
            (entry for entry in row.get("goodput_breakdown", []) if entry["rate"] == lowest),
            None,
        )
    return Measured(
        name=name,
        goodput_req_per_s=None if goodput is None else float(goodput),
        c1_ttft_p50=row["c1"]["ttft_ms"]["p50"],
        c1_tpot_p50=row["c1"]["tpot_ms"]["p50"],
        c16_tok_per_s=row["c16"]["output_tok_per_s"],
        mixed_ttft_p99=row["mixed"]["short_ttft_ms"]["p99"],
        mixed_tpot_p50=row["mixed"]["short_tpot_ms"]["p50"],
        mixed_itl_p99=row["mixed"]["short_itl_ms"]["p99"],
        idle_cpu_pct=row["idle_cpu_total_pct"],
        pss_mib=row["pss_total_mib"],
        first_miss=first_miss,
    )


def _where_missed(miss: dict[str, Any] | None) -> str:
    if miss is None:
        return "it met the SLO at every rate tried"
    parts = []
    for kind in ("short", "long"):
        figures = miss.get(kind) or {}
        if not figures.get("requests"):
            continue
        parts.append(
            f"{figures['over_ttft']:.0%} of {kind} requests over the TTFT target "
            f"(p90 {figures['ttft_p90_ms']:.0f} ms), {figures['over_tpot']:.0%} over the "
            f"TPOT target (p90 {figures['tpot_p90_ms']:.1f} ms)"
        )
    if miss.get("failed"):
        parts.append(f"{miss['failed']} failed")
    return f"at {miss['rate']:g} req/s: " + "; ".join(parts)


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The winner of a compare run at its SLO, and the reasons, from its figures."""
    conditions = result.get("conditions", {})
    target = float(conditions.get("slo_attainment", 0.9))
    try:
        systems = [measured(name, row, target) for name, row in result["rows"].items()]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a compare row lacks {exc}: rerun load_tests.serving.compare") from None
    with_goodput = [s for s in systems if s.goodput_req_per_s is not None]
    if with_goodput:
        by = "goodput at the SLO"
        ranked = sorted(with_goodput, key=lambda s: -(s.goodput_req_per_s or 0.0))
    else:
        by = "mixed-load short-request TTFT p99 (the run measured no goodput)"
        ranked = sorted(systems, key=lambda s: s.mixed_ttft_p99)
    winner = ranked[0]
    reasons = []
    for other in ranked[1:]:
        if with_goodput:
            ratio = (other.goodput_req_per_s or 0.0) / (winner.goodput_req_per_s or math.nan)
            head = (
                f"{other.name}: goodput {other.goodput_req_per_s:g} req/s, "
                f"{ratio:.2f}x the winner's; {_where_missed(other.first_miss)}"
            )
        else:
            head = f"{other.name}: mixed TTFT p99 {other.mixed_ttft_p99:.0f} ms"
        reasons.append(
            f"{head}. Mixed load: TTFT p99 {other.mixed_ttft_p99:.0f} vs "
            f"{winner.mixed_ttft_p99:.0f} ms, TPOT p50 {other.mixed_tpot_p50:.1f} vs "
            f"{winner.mixed_tpot_p50:.1f} ms; c=16 {other.c16_tok_per_s:,.0f} vs "
            f"{winner.c16_tok_per_s:,.0f} tok/s; c=1 TTFT p50 {other.c1_ttft_p50:.1f} vs "
            f"{winner.c1_ttft_p50:.1f} ms"
        )
    if with_goodput and winner.first_miss is not None:
        reasons.append(f"{winner.name} itself: {_where_missed(winner.first_miss)}")
    return {
        "winner": winner.name,
        "ranked_by": by,
        "slo": {
            "ttft_ms": conditions.get("slo_ttft_ms"),
            "tpot_ms": conditions.get("slo_tpot_ms"),
            "attainment": target,
        },
        "machine": conditions.get("cpu"),
        "systems": [s.__dict__ for s in ranked],
        "reasons": reasons,
    }


def table(answer: dict[str, Any]) -> str:
    """The verdict as text."""
    slo = answer["slo"]
    lines = [
        f"winner: {answer['winner']} (by {answer['ranked_by']}; SLO TTFT {slo['ttft_ms']} ms, "
        f"TPOT {slo['tpot_ms']} ms, {slo['attainment']:.0%} of requests; "
        f"measured on {answer['machine']})",
        "",
        f"{'system':<52}{'goodput':>9}{'mix TTFT p99':>14}{'mix TPOT p50':>14}"
        f"{'c16 tok/s':>11}{'c1 TTFT p50':>13}",
    ]
    for s in answer["systems"]:
        goodput = "n/a" if s["goodput_req_per_s"] is None else f"{s['goodput_req_per_s']:g}"
        lines.append(
            f"{s['name']:<52}{goodput:>9}{s['mixed_ttft_p99']:>14.0f}"
            f"{s['mixed_tpot_p50']:>14.1f}{s['c16_tok_per_s']:>11,.0f}{s['c1_ttft_p50']:>13.1f}"
        )
    lines += ["", "why:"] + [f"- {reason}" for reason in answer["reasons"]]
    return "\n".join(lines)
