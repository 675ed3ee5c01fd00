"""The load arriving at the front door, as the SLO policy's model check reads it.

Each ingress replica counts every request that reaches admission control, refused ones
included (the pools never see those), and the mix of the requests it completed: prompt
and output tokens, and whether the prefill pool served the prompt. Serve polls the
ingress's ``record_autoscaling_stats()`` (:meth:`DemandMeter.figures`), averages the
figures over the look-back period and hands them to the application-level policy,
which asks the planner's model what split of replicas that load needs
(:mod:`app.split_model`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    """Requests per second arriving, and the mix of those recently completed."""

    requests_per_s: float
    remote_share: float  # of requests, prefilled by the prefill pool
    remote_prompt_tokens: float  # mean prompt of those
    remote_output_tokens: float  # mean output of those
    local_prompt_tokens: float  # mean prompt of those prefilled on decode
    local_output_tokens: float  # mean output of those

    @classmethod
    def from_figures(cls, figures: dict[str, float]) -> Demand | None:
        """From :meth:`DemandMeter.figures` (summed or averaged over replicas); None
        when nothing has completed yet, so the mix is unknown."""
        if figures.get("completed_per_s", 0.0) <= 0:
            return None
        return cls(
            requests_per_s=figures.get("arrivals_per_s", 0.0),
            remote_share=figures.get("remote_share", 0.0),
            remote_prompt_tokens=figures.get("remote_prompt_tokens", 0.0),
            remote_output_tokens=figures.get("remote_output_tokens", 0.0),
            local_prompt_tokens=figures.get("local_prompt_tokens", 0.0),
            local_output_tokens=figures.get("local_output_tokens", 0.0),
        )


class DemandMeter:
    """Arrivals and completed requests over the last ``window_s`` (thread-safe: Serve may
    poll :meth:`figures` from another thread than the requests')."""

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._arrivals: deque[float] = deque()
        self._completed: deque[tuple[float, int, int, bool]] = deque()
        self._lock = threading.Lock()

    def arrived(self) -> None:
        """A request reached admission control (admitted or not)."""
        with self._lock:
            self._arrivals.append(self._clock())

    def completed(self, prompt_tokens: int, output_tokens: int, remote: bool) -> None:
        with self._lock:
            self._completed.append((self._clock(), prompt_tokens, output_tokens, remote))

    def figures(self) -> dict[str, float]:
        """Rates over the window and the completed requests' mean lengths (Serve custom
        metrics: floats only)."""
        since = self._clock() - self.window_s
        with self._lock:
            while self._arrivals and self._arrivals[0] <= since:
                self._arrivals.popleft()
            while self._completed and self._completed[0][0] <= since:
                self._completed.popleft()
            arrivals, done = len(self._arrivals), list(self._completed)
        remote = [(p, o) for _, p, o, r in done if r]
        local = [(p, o) for _, p, o, r in done if not r]
        return {
            "arrivals_per_s": arrivals / self.window_s,
            "completed_per_s": len(done) / self.window_s,
            "remote_share": len(remote) / len(done) if done else 0.0,
            "remote_prompt_tokens": _mean([p for p, _ in remote]),
            "remote_output_tokens": _mean([o for _, o in remote]),
            "local_prompt_tokens": _mean([p for p, _ in local]),
            "local_output_tokens": _mean([o for _, o in local]),
        }


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0
