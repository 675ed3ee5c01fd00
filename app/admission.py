"""Admission control at the ingress: shed what cannot get a first token within the budget.

Each ingress replica tracks the HTTP requests it has admitted that still wait for their
first token. A new request is refused, at once, with 503 and a ``Retry-After``, when

- ``max_waiting`` requests already wait, or
- the oldest of them has waited longer than the limit (``headroom`` times
  ``ttft_budget_s``), or
- while any request waits, the requests that got their first token in the last
  ``window_s`` waited longer than the limit, in the median, or
- as many requests already wait as the learned depth allows: a request admitted behind
  ``d - 1`` others that waited ``w`` over the limit lowers it to ``d * limit / w``
  (how many the pools serve within the limit, by Little's law); one served within the
  limit from near that depth raises it by one, up to ``max_waiting``.

Neither wait rule needs an estimate of the pools' capacity (CoDel's idea: judge a queue
by how long its items wait, not by its length). While waits stay under the limit, the
queue is admitted whole, however large a burst the engines can batch; once the pools
fall behind, the queue is held to what they serve within the limit and the rest is
shed. The oldest wait reacts before anyone is served; the recent waits catch what the
oldest misses, because first tokens do not come in arrival order (prefill batches,
prompts prefilled on decode while the prefill pool is backed up, decode slots freed as
other streams end). The headroom (0.5 by default) is for that spread too. Both react
only once waits have passed the limit, so what a sudden burst brought in before then
waits longer; the depth rule remembers how deep a queue the pools served in time, and
holds the next burst to it.

Serve's ``max_queued_requests`` bounds each deployment's queue behind this (a pool that
is full answers ``BackPressureError``, which the ingress also turns into a 503).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import deque
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
        self._admission._leave(self._number, served=True)

    def done(self) -> None:
        self._admission._leave(self._number, served=False)


class Admission:
    def __init__(
        self,
        ttft_budget_s: float,
        max_waiting: int,
        retry_after_s: int = 1,
        headroom: float = 0.5,
        window_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        learn_depth: bool = True,
    ) -> None:
        self.limit_s = headroom * ttft_budget_s
        self.ttft_budget_s = ttft_budget_s
        self.max_waiting = max_waiting
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.shed = 0
        self._numbers = itertools.count()
        # admitted, no first token yet -> (since, how many waited ahead of it)
        self._waiting: dict[int, tuple[float, int]] = {}
        self.window_s = window_s
        self._served: deque[tuple[float, float]] = deque()  # (when, waited), recent
        self.depth = float(max_waiting)  # how many may wait at once (learned)
        self.learn_depth = learn_depth

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def oldest_wait_s(self) -> float:
        """How long the longest-waiting admitted request has waited (0 when none)."""
        oldest = next(iter(self._waiting.values()), None)
        return 0.0 if oldest is None else self.clock() - oldest[0]

    def recent_wait_s(self) -> float:
        """The median first-token wait of requests served in the last ``window_s`` (0 if none)."""
        self._forget_before(self.clock() - self.window_s)
        if not self._served:
            return 0.0
        return statistics.median(waited for _, waited in self._served)

    def admit(self) -> Ticket:
        """A ticket for a new request, or :class:`Overloaded`."""
        if self.waiting >= self.max_waiting:
            self._refuse(f"{self.waiting} requests already wait for their first token")
        if self.waiting >= self.depth:
            self._refuse(
                f"{self.waiting} requests already wait for their first token, and lately "
                f"one admitted behind that many waited over {self.limit_s:g} s"
            )
        oldest = self.oldest_wait_s()
        if oldest > self.limit_s:
            self._refuse(
                f"requests wait {oldest:.1f} s for a first token (budget "
                f"{self.ttft_budget_s:g} s, admitting while under {self.limit_s:g} s)"
            )
        # Slow recent first tokens mean the pools are behind only while a queue remains:
        # once it has drained, a new request is served at once.
        recent = self.recent_wait_s() if self.waiting else 0.0
        if recent > self.limit_s:
            self._refuse(
                f"first tokens came after {recent:.1f} s lately (budget "
                f"{self.ttft_budget_s:g} s, admitting while under {self.limit_s:g} s)"
            )
        number = next(self._numbers)
        self._waiting[number] = (self.clock(), self.waiting)
        return Ticket(self, number)

    def _forget_before(self, horizon: float) -> None:
        while self._served and self._served[0][0] < horizon:
            self._served.popleft()

    def _refuse(self, why: str) -> None:
        self.shed += 1
        raise Overloaded(f"server overloaded: {why}; retry later", self.retry_after_s)

    def _leave(self, number: int, served: bool) -> None:
        entry = self._waiting.pop(number, None)
        if entry is None or not served:
            return
        since, ahead = entry
        now = self.clock()
        waited = now - since
        self._served.append((now, waited))
        self._forget_before(now - self.window_s)  # kept only as long as the window
        if not self.learn_depth:
            return
        if waited > self.limit_s and ahead:
            # (A request that waited alone says how slow the pools are, not how deep a
            # queue they serve in time: the oldest-wait rule covers it.)
            self.depth = min(self.depth, max(1.0, (ahead + 1) * self.limit_s / waited))
        elif ahead + 1 >= self.depth - 1:
            self.depth = min(float(self.max_waiting), self.depth + 1)
