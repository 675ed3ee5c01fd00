"""Admission control at the ingress: shed what cannot get a first token within the budget.

Each ingress replica counts the HTTP requests it has admitted that wait for their first
token, and estimates how fast first tokens come while any request waits (the pools'
capacity as this replica sees it). A new request is refused, at once, with 503 and a
``Retry-After``, when

- ``max_waiting`` requests already wait, or
- its estimated wait, (waiting + 1) ÷ capacity, exceeds ``ttft_budget_s``.

The capacity estimate counts first tokens per second of *busy* time (time during which
some request waited), decayed with a half-life of ``window_s``; it is used once
``min_samples`` first tokens have been seen. Under light load that is about one request
per TTFT, so a short queue is always admitted; under overload it is the rate the pools
really serve, so the queue is held to what they serve within the budget.

Serve's ``max_queued_requests`` bounds each deployment's queue behind this (a pool that
is full answers ``BackPressureError``, which the ingress also turns into a 503).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


class Overloaded(Exception):
    """The request is refused; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass
class _Decayed:
    """A sum that halves every ``half_life_s``."""

    half_life_s: float
    value: float = 0.0
    at: float = 0.0

    def add(self, amount: float, now: float) -> None:
        self.value = self.read(now) + amount
        self.at = now

    def read(self, now: float) -> float:
        if not self.at:
            return self.value
        return self.value * math.pow(0.5, max(now - self.at, 0.0) / self.half_life_s)


class Ticket:
    """One admitted request: call :meth:`first_token` once it has one, :meth:`done` at
    the end (either may be called more than once)."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._waiting = True

    def first_token(self) -> None:
        if self._waiting:
            self._waiting = False
            self._admission._leave(served=True)

    def done(self) -> None:
        if self._waiting:
            self._waiting = False
            self._admission._leave(served=False)


class Admission:
    def __init__(
        self,
        ttft_budget_s: float,
        max_waiting: int,
        retry_after_s: int = 1,
        window_s: float = 10.0,
        min_samples: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttft_budget_s = ttft_budget_s
        self.max_waiting = max_waiting
        self.retry_after_s = retry_after_s
        self.min_samples = min_samples
        self.clock = clock
        self.waiting = 0
        self.shed = 0
        self._marked = 0.0
        self._busy_s = _Decayed(window_s)
        self._served = _Decayed(window_s)
        self._samples = 0

    def capacity(self) -> float | None:
        """First tokens per busy second, once there are enough samples."""
        if self._samples < self.min_samples:
            return None
        now = self.clock()
        busy = self._busy_s.read(now) + (now - self._marked if self.waiting else 0.0)
        served = self._served.read(now)
        return served / busy if busy > 0 and served > 0 else None

    def admit(self) -> Ticket:
        """A ticket for a new request, or :class:`Overloaded`."""
        if self.waiting >= self.max_waiting:
            self._refuse(f"{self.waiting} requests already wait for their first token")
        capacity = self.capacity()
        if capacity is not None:
            expected = (self.waiting + 1) / capacity
            if expected > self.ttft_budget_s:
                self._refuse(
                    f"a first token would take about {expected:.1f} s "
                    f"(budget {self.ttft_budget_s:g} s)"
                )
        self._mark(self.clock())
        self.waiting += 1
        return Ticket(self)

    def _refuse(self, why: str) -> None:
        self.shed += 1
        raise Overloaded(f"server overloaded: {why}; retry later", self.retry_after_s)

    def _leave(self, served: bool) -> None:
        now = self.clock()
        self._mark(now)
        if served:
            self._served.add(1.0, now)
            self._samples += 1
        self.waiting -= 1

    def _mark(self, now: float) -> None:
        """Count the time since the last event as busy if any request was waiting."""
        if self.waiting:
            self._busy_s.add(now - self._marked, now)
        self._marked = now
