"""Counters exported at 0 from the start, for every label value known in advance.

A Prometheus counter series that appears only at its first event shows "No data" on a
dashboard until then, and ``rate()`` misses that first event; Prometheus's guidance is to
initialise the label values known in advance. Ray's ``Counter.inc`` refuses 0, so this
records the 0 through the point it would record (``Metric._record``, Ray 2.60).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def start_at_zero(counter: Any, label_sets: Iterable[dict[str, str]] = ({},)) -> None:
    """Export ``counter`` (a ``ray.util.metrics.Counter``) at 0 for each label set."""
    for tags in label_sets:
        counter._record(0.0, tags=tags or None)
