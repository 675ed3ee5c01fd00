"""Admission control at the ingress: shed what cannot get a first token within the budget.

Each ingress replica tracks the HTTP requests it has admitted that still wait for their
first token. A new request is refused, at once, with 503 and a ``Retry-After``, when

- ``max_waiting`` requests already wait, or
- the oldest of them has waited longer than ``headroom`` times ``ttft_budget_s``.

The second rule needs no estimate of the pools' capacity: first tokens come roughly in
arrival order, so the oldest waiting request's age is about the wait a new one faces
(queue length ÷ the rate the pools really serve). While it stays under the limit the
queue is admitted whole, however large a burst the engines can batch; once the pools fall
behind, the queue is held to what they serve within the limit, and the rest is shed
(CoDel's idea: judge a queue by how long its items wait, not by its length). The
headroom (0.5 by default) leaves room for requests that wait longer than the oldest
one did: first tokens are not strictly in order (prefill batches, decode slots freed as
other streams end).

Serve's ``max_queued_requests`` bounds each deployment's queue behind this (a pool that
is full answers ``BackPressureError``, which the ingress also turns into a 503).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable


class Overloaded(Exception):
    """The request is refused; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Ticket:
    """One admitted request: call :meth:`first_token` once it has one, :meth:`done` at
    the end (either may be called more than once, in any order)."""

    def __init__(self, admission: Admission, number: int) -> None:
        self._admission = admission
        self._number = number

    def first_token(self) -> None:
        self._admission._leave(self._number)

    def done(self) -> None:
        self._admission._leave(self._number)


class Admission:
    def __init__(
        self,
        ttft_budget_s: float,
        max_waiting: int,
        retry_after_s: int = 1,
        headroom: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit_s = headroom * ttft_budget_s
        self.ttft_budget_s = ttft_budget_s
        self.max_waiting = max_waiting
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.shed = 0
        self._numbers = itertools.count()
        self._waiting: dict[int, float] = {}  # admitted, no first token yet -> since

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def oldest_wait_s(self) -> float:
        """How long the longest-waiting admitted request has waited (0 when none)."""
        since = next(iter(self._waiting.values()), None)
        return 0.0 if since is None else self.clock() - since

    def admit(self) -> Ticket:
        """A ticket for a new request, or :class:`Overloaded`."""
        if self.waiting >= self.max_waiting:
            self._refuse(f"{self.waiting} requests already wait for their first token")
        oldest = self.oldest_wait_s()
        if oldest > self.limit_s:
            self._refuse(
                f"requests wait {oldest:.1f} s for a first token (budget "
                f"{self.ttft_budget_s:g} s, admitting while under {self.limit_s:g} s)"
            )
        number = next(self._numbers)
        self._waiting[number] = self.clock()
        return Ticket(self, number)

    def _refuse(self, why: str) -> None:
        self.shed += 1
        raise Overloaded(f"server overloaded: {why}; retry later", self.retry_after_s)

    def _leave(self, number: int) -> None:
        self._waiting.pop(number, None)
