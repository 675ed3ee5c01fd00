"""SLO attainment and goodput, as DistServe defines them.

A request meets the SLO when its TTFT and its TPOT are both within bounds. Goodput is the
highest request rate at which at least ``target`` (90%) of requests meet the SLO; it is
found by sweeping rates upward until attainment drops below the target, then bisecting
between the last rate that met it and the first that did not (the search is
:mod:`app.advice.goodput`, shared with the planner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.advice.goodput import GoodputSearch, find_goodput
from load_tests.stats import StreamTiming

__all__ = ["SLO", "GoodputSearch", "attainment", "find_goodput"]


@dataclass(frozen=True)
class SLO:
    ttft_s: float
    tpot_s: float

    def met_by(self, timing: StreamTiming) -> bool:
        tpot = timing.tpot
        return timing.ttft <= self.ttft_s and (math.isnan(tpot) or tpot <= self.tpot_s)


def attainment(timings: Sequence[StreamTiming], slo: SLO, failed: int = 0) -> float:
    """Share of requests (failed ones count as misses) that met the SLO."""
    total = len(timings) + failed
    if total == 0:
        return 0.0
    return sum(1 for t in timings if slo.met_by(t)) / total
