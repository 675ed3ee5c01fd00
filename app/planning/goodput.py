"""SLO attainment and the goodput search, as DistServe defines them.

A request meets the SLO when its TTFT and its TPOT are both within bounds. Goodput is
the highest rate at which at least ``target`` (90%) of requests meet the SLO. It is found
by sweeping rates upward (x ``growth``) until attainment drops below the target, then
bisecting between the last rate that met it and the first that did not.
``measure(rate)`` returns the attainment at a rate: a real load test (load_tests) and a
simulation (the planner) both use this one search and this one SLO check.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class Timed(Protocol):
    """One request's TTFT and TPOT in seconds (TPOT is nan for a one-token output)."""

    @property
    def ttft(self) -> float: ...

    @property
    def tpot(self) -> float: ...


@dataclass(frozen=True)
class SLO:
    ttft_s: float
    tpot_s: float

    def met_by(self, timing: Timed) -> bool:
        tpot = timing.tpot
        return timing.ttft <= self.ttft_s and (math.isnan(tpot) or tpot <= self.tpot_s)


def add_slo_options(parser: Any, ttft_ms: float, tpot_ms: float) -> None:
    """``--slo-config``, ``--slo-ttft-ms``, ``--slo-tpot-ms`` on an argparse parser; read
    them back with :func:`slo_from_options`."""
    parser.add_argument(
        "--slo-config",
        help="a serve config whose `slo:` block gives the targets and the attainment "
        "(the --slo-*-ms flags override it)",
    )
    parser.add_argument("--slo-ttft-ms", type=float, help=f"TTFT target (default {ttft_ms:g})")
    parser.add_argument("--slo-tpot-ms", type=float, help=f"TPOT target (default {tpot_ms:g})")
    parser.set_defaults(slo_defaults=(ttft_ms, tpot_ms, 0.9))


def slo_from_options(args: Any) -> tuple[SLO, float]:
    """The SLO and the attainment target from :func:`add_slo_options`' flags (and fill
    ``args.slo_ttft_ms`` / ``args.slo_tpot_ms`` with what was chosen)."""
    ttft_ms, tpot_ms, target = args.slo_defaults
    if args.slo_config:
        from app.config import SloConfig

        config = SloConfig.from_serve_file(args.slo_config)
        ttft_ms, tpot_ms, target = config.ttft_ms, config.tpot_ms, config.attainment
    args.slo_ttft_ms = args.slo_ttft_ms if args.slo_ttft_ms is not None else ttft_ms
    args.slo_tpot_ms = args.slo_tpot_ms if args.slo_tpot_ms is not None else tpot_ms
    return SLO(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000), target


def attainment(timings: Sequence[Timed], slo: SLO, failed: int = 0) -> float:
    """Share of requests (failed ones count as misses) that met the SLO."""
    total = len(timings) + failed
    if total == 0:
        return 0.0
    return sum(1 for t in timings if slo.met_by(t)) / total


def misses(timings: Sequence[Timed], slo: SLO) -> dict[str, float]:
    """Where an attainment falls short: the share of ``timings`` over the TTFT target and
    over the TPOT target (a request can be over both), with their p50 and p90 in ms."""
    ttfts = sorted(t.ttft for t in timings)
    tpots = sorted(t.tpot for t in timings if not math.isnan(t.tpot))

    def at(values: list[float], q: float) -> float:
        return (
            round(values[min(int(q * len(values)), len(values) - 1)] * 1000, 2)
            if values
            else math.nan
        )

    count = max(len(ttfts), 1)
    return {
        "requests": len(ttfts),
        "over_ttft": round(sum(1 for v in ttfts if v > slo.ttft_s) / count, 3),
        "over_tpot": round(sum(1 for v in tpots if v > slo.tpot_s) / count, 3),
        "ttft_p50_ms": at(ttfts, 0.5),
        "ttft_p90_ms": at(ttfts, 0.9),
        "tpot_p50_ms": at(tpots, 0.5),
        "tpot_p90_ms": at(tpots, 0.9),
    }


def requests_at(rate: float, seconds: float, fewest: int) -> int:
    """Requests to send at ``rate`` for ``seconds`` of arrivals, at least ``fewest``.

    Every rate a goodput search tries must last: a short burst drains inside the SLO at
    any rate and would overstate goodput.
    """
    return max(fewest, math.ceil(rate * seconds))


@dataclass
class GoodputSearch:
    """The rates tried and the attainment measured at each, in the order tried."""

    tried: list[tuple[float, float]] = field(default_factory=list)
    goodput: float = 0.0


def find_goodput(
    measure: Callable[[float], float],
    start_rate: float,
    target: float = 0.9,
    growth: float = 2.0,
    max_rate: float = 1e6,
    bisections: int = 4,
) -> GoodputSearch:
    """Highest rate with ``measure(rate) >= target``: sweep up by ``growth``, then bisect."""
    if start_rate <= 0 or growth <= 1:
        raise ValueError("start_rate must be > 0 and growth > 1")
    search = GoodputSearch()

    def ok(rate: float) -> bool:
        value = measure(rate)
        search.tried.append((rate, value))
        return value >= target

    low, high = 0.0, start_rate
    while high <= max_rate and ok(high):
        low, high = high, high * growth
    if high > max_rate:
        search.goodput = low
        return search
    for _ in range(bisections):
        middle = (low + high) / 2
        if middle <= 0:
            break
        if ok(middle):
            low = middle
        else:
            high = middle
    search.goodput = low
    return search


def find_goodput_repeated(
    measure: Callable[[float, int], float], repeats: int, **search: Any
) -> list[GoodputSearch]:
    """``repeats`` searches one after another (:func:`find_goodput`'s ``search``
    arguments), ``measure(rate, repeat)`` sending requests of its own in each: on a shared
    machine one search's goodput can be off by a factor of two, so a run reports the
    median and the spread."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")

    def at(repeat: int) -> Callable[[float], float]:
        return lambda rate: measure(rate, repeat)

    return [find_goodput(at(repeat), **search) for repeat in range(repeats)]


def median_goodput(searches: Sequence[GoodputSearch]) -> float:
    """The median of the searches' goodputs."""
    return float(statistics.median(search.goodput for search in searches))
