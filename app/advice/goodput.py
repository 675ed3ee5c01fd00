"""The goodput search: the highest request rate at which enough requests meet the SLO.

DistServe's goodput is the highest rate at which at least ``target`` (90%) of requests
meet both the TTFT and the TPOT SLO. It is found by sweeping rates upward (x ``growth``)
until attainment drops below the target, then bisecting between the last rate that met
it and the first that did not. ``measure(rate)`` returns the attainment at a rate: a
real load test (load_tests) or a simulation (the planner) both use this one search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


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
