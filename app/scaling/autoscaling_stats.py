"""What an engine replica reports to the SLO autoscaling policy (Serve custom metrics).

Serve calls each replica's ``record_autoscaling_stats()`` a few times per look-back
period and hands the policy, per replica, the mean of what it returned over that period
(``deployments.slo_autoscaler``). A replica returns figures over the last ``window_s``,
worked out from its engine's own figures (:class:`app.observability.engine_tally.EngineTally`,
kept as the engine steps) and its busy clock
(:class:`app.observability.engine_metrics.BusyClock`):

- ``requests_per_s``, ``prompt_tokens_per_s``, ``uncached_prompt_tokens_per_s``: arrivals
  the engine finished prefilling (from the TTFT histogram's count and the prompt-token
  counters);
- ``arrived_prompt_tokens_per_s``: prompt tokens handed to the engine, counted as they
  arrive (the replica's own count): above ``prompt_tokens_per_s`` while prompts queue;
- ``busy``: the share of the window the engine was stepping (its utilization);
- ``ttft_s``, ``tpot_s``: the SLO percentile of the engine's time to first token and of
  its inter-token latency over the window (0 when nothing was measured:
  ``requests_per_s`` / ``tokens_per_s`` say whether the figure means anything);
- ``tokens_per_s``: output tokens after the first (inter-token samples);
- ``running``, ``waiting`` (for room in the batch, not for KV to arrive), ``kv_usage``:
  the engine's scheduler now.

On a prefill engine TTFT is the prompt's queue plus prefill; on a decode engine it is
the KV's arrival plus the first step (or a local prefill), which is what the TTFT budget
of prefill leaves out.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

# The scheduler's figures now, as every snapshot carries them.
GAUGES = ("running", "waiting", "kv_usage")

Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending


@dataclass(frozen=True)
class Snapshot:
    """An engine's cumulative metrics at one moment."""

    at_s: float
    busy_s: float
    arrived_prompt_tokens: float = 0.0
    prompt_tokens: float = 0.0
    cached_prompt_tokens: float = 0.0
    ttft: Buckets = ()
    itl: Buckets = ()
    gauges: dict[str, float] = field(default_factory=dict)


def histogram_percentile(buckets: Buckets, q: float) -> float | None:
    """The ``q`` (0..1) quantile of a cumulative histogram, interpolated linearly inside
    its bucket as Prometheus' ``histogram_quantile`` does; the last finite bound when it
    falls in the ``+Inf`` bucket; None for an empty histogram."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def _minus(later: Buckets, earlier: Buckets) -> Buckets:
    before = dict(earlier)
    return tuple((bound, count - before.get(bound, 0.0)) for bound, count in later)


class WindowStats:
    """An engine's figures over the last ``window_s`` from snapshots added over time."""

    def __init__(self, window_s: float, percentile: float) -> None:
        self.window_s = window_s
        self.quantile = percentile / 100
        self._snapshots: deque[Snapshot] = deque()

    def add(self, snapshot: Snapshot) -> dict[str, float]:
        """Add ``snapshot`` (the newest) and return the window's figures."""
        self._snapshots.append(snapshot)
        # Keep the newest snapshot at least window_s old as the window's start.
        while len(self._snapshots) > 2 and self._snapshots[1].at_s <= snapshot.at_s - self.window_s:
            self._snapshots.popleft()
        return self.figures()

    def figures(self) -> dict[str, float]:
        newest = self._snapshots[-1]
        figures = {key: newest.gauges.get(key, 0.0) for key in GAUGES}
        oldest = self._snapshots[0]
        # One snapshot spans no time and counts nothing yet: every rate reads 0.
        span = (newest.at_s - oldest.at_s) or math.inf
        ttft = _minus(newest.ttft, oldest.ttft)
        itl = _minus(newest.itl, oldest.itl)
        prompt = newest.prompt_tokens - oldest.prompt_tokens
        cached = newest.cached_prompt_tokens - oldest.cached_prompt_tokens
        return {
            **figures,
            "requests_per_s": (ttft[-1][1] if ttft else 0.0) / span,
            "prompt_tokens_per_s": prompt / span,
            "arrived_prompt_tokens_per_s": (
                newest.arrived_prompt_tokens - oldest.arrived_prompt_tokens
            )
            / span,
            "uncached_prompt_tokens_per_s": max(0.0, prompt - cached) / span,
            "tokens_per_s": (itl[-1][1] if itl else 0.0) / span,
            "busy": min(1.0, max(0.0, (newest.busy_s - oldest.busy_s) / span)),
            "ttft_s": histogram_percentile(ttft, self.quantile) or 0.0,
            "tpot_s": histogram_percentile(itl, self.quantile) or 0.0,
        }
