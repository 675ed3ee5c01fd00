"""The load arriving at the front door, as the SLO policy's model check reads it.

Each ingress replica counts every request it admits with a valid key and a well-formed
body (not those it refuses: a cheap flood of refused or unauthenticated requests must
not size the pools; under real overload the SLO rules, which read the pools' TTFT and
queues, scale up), and the mix of the requests it completed: prompt
and output tokens, and whether the prefill pool served the prompt. Serve polls the
ingress's ``record_autoscaling_stats()`` (:meth:`DemandMeter.figures`), averages the
figures over the look-back period and hands them to the application-level policy,
which asks the planner's model what split of replicas that load needs
(:mod:`app.scaling.split_model`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
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
        """From :meth:`DemandMeter.figures` (each rate summed over replicas); None when
        nothing has completed, so the mix is unknown. Rates, not means, cross Serve:
        it averages each figure over its look-back period, and a mean averaged with a
        window that had none (reported as 0) would read low."""
        remote = figures.get("remote_completed_per_s", 0.0)
        local = figures.get("local_completed_per_s", 0.0)
        if remote + local <= 0:
            return None

        def per(name: str, count: float) -> float:
            return figures.get(name, 0.0) / count if count > 0 else 0.0

        return cls(
            requests_per_s=figures.get("arrivals_per_s", 0.0),
            remote_share=remote / (remote + local),
            remote_prompt_tokens=per("remote_prompt_tokens_per_s", remote),
            remote_output_tokens=per("remote_output_tokens_per_s", remote),
            local_prompt_tokens=per("local_prompt_tokens_per_s", local),
            local_output_tokens=per("local_output_tokens_per_s", local),
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
        """Rates over the window: arrivals, and completions and their prompt and output
        tokens by kind (Serve custom metrics: floats only)."""
        since = self._clock() - self.window_s
        with self._lock:
            while self._arrivals and self._arrivals[0] <= since:
                self._arrivals.popleft()
            while self._completed and self._completed[0][0] <= since:
                self._completed.popleft()
            arrivals, done = len(self._arrivals), [c[1:] for c in self._completed]
        return demand_figures(arrivals, done, self.window_s)


def demand_figures(
    arrivals: int, completed: Iterable[tuple[int, int, bool]], window_s: float
) -> dict[str, float]:
    """The figures of :meth:`DemandMeter.figures` for ``arrivals`` and ``completed``
    (prompt tokens, output tokens, remote) over ``window_s`` (the scaling simulator
    reports its ingress's demand with it too)."""
    done = list(completed)
    figures = {"arrivals_per_s": arrivals / window_s}
    for kind, remote in (("remote", True), ("local", False)):
        mine = [(p, o) for p, o, r in done if r is remote]
        figures[f"{kind}_completed_per_s"] = len(mine) / window_s
        figures[f"{kind}_prompt_tokens_per_s"] = sum(p for p, _ in mine) / window_s
        figures[f"{kind}_output_tokens_per_s"] = sum(o for _, o in mine) / window_s
    return figures
