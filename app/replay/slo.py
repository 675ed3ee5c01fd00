"""How well a run met an SLO: DistServe's attainment and Etalon's fluidity-index.

- **Attainment** (DistServe): the share of requests whose TTFT and mean TPOT are both
  within their bounds. A request refused or failed counts as missed.
- **Fluidity-index** (Etalon, Agrawal et al. 2024): TTFT and mean TPOT hide stalls in a
  stream; the fluidity-index gives every token a deadline and counts the share met.
  Token 0's deadline is ``ttft_s`` after arrival; token ``i``'s is ``tpot_s`` per token
  after the last *anchor*: at first the first deadline, and after each miss the time
  the late token really came (the slack: one stall is one miss, not a miss of every
  later token). A request refused or failed meets none of its deadlines.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.planning.goodput import SLO as Slo

__all__ = ["Slo", "attainment", "deadlines_met", "fluidity_index", "meets"]


def meets(ttft_s: float | None, tpot_s: float | None, slo: Slo) -> bool:
    """Whether one answered request is within both bounds (TPOT None: one token)."""
    return ttft_s is not None and ttft_s <= slo.ttft_s and (tpot_s or 0.0) <= slo.tpot_s


def attainment(outcomes: Sequence[tuple[float | None, float | None]], slo: Slo) -> float:
    """The share of requests (TTFT, mean TPOT; None TTFT: refused or failed) within both
    bounds; 0 for no request."""
    if not outcomes:
        return 0.0
    return sum(meets(ttft, tpot, slo) for ttft, tpot in outcomes) / len(outcomes)


def deadlines_met(token_times_s: Sequence[float], slo: Slo) -> int:
    """How many of a stream's tokens (their arrival times, seconds from the request's
    arrival) came by their deadline."""
    met = 0
    anchor_s, anchor_index = slo.ttft_s, 0
    for index, at_s in enumerate(token_times_s):
        deadline = anchor_s + (index - anchor_index) * slo.tpot_s
        if at_s <= deadline:
            met += 1
        else:  # missed: later deadlines run from when this token came
            anchor_s, anchor_index = at_s, index
    return met


def fluidity_index(streams: Sequence[tuple[Sequence[float], int]], slo: Slo) -> float:
    """Deadlines met over deadlines set, over ``streams`` (each: its tokens' arrival
    times, and how many tokens it was to have: a short or refused stream misses the
    rest); 0 for none."""
    total = sum(expected for _, expected in streams)
    if not total:
        return 0.0
    met = sum(min(deadlines_met(times, slo), expected) for times, expected in streams)
    return met / total
