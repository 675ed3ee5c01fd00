"""Latency statistics for load tests: percentiles and per-request stream timings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation, as numpy's default."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """p50 / p95 / p99 (multiplied by ``scale``, e.g. 1000 for ms) and the count."""
    return {
        "n": float(len(values)),
        "p50": percentile(values, 50) * scale,
        "p95": percentile(values, 95) * scale,
        "p99": percentile(values, 99) * scale,
    }


@dataclass(frozen=True)
class StreamTiming:
    """Client-side timings of one streamed request, in seconds from sending it.

    ``token_times`` holds the arrival time of each *token* (a chunk carrying k tokens
    counts k times), so TPOT is per token, not per chunk.
    """

    ttft: float
    end: float
    output_tokens: int
    server: dict[str, Any] | None = None  # the response's `splitserve` field, if any
    chunk_gaps: tuple[float, ...] = ()  # seconds between successive content events (ITL)
    prompt_tokens: int = 0

    @property
    def tpot(self) -> float:
        """Mean time per output token after the first."""
        if self.output_tokens <= 1:
            return math.nan
        return (self.end - self.ttft) / (self.output_tokens - 1)
