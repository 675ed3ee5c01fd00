"""Admission control at the ingress: shed, at once, only what cannot get a first token
within the budget, judged by what the pools do now.

Each ingress replica tracks the HTTP requests it has admitted that still wait for their
first token, and measures the pools' *drain rate*: first tokens served per second of
*busy* time (time during which at least one admitted request was waiting), from the
spacing of the first tokens served in the last ``window_s`` busy seconds. Idle time does
not count, so a rate measured during the last burst still holds when the next one comes;
a stall before a batch of first tokens (a cold start, a restart, one slow request) does
not count either, and anything older than a few seconds of work is forgotten. A new
request is refused with 503 and a ``Retry-After`` when

- ``max_waiting`` requests already wait (:attr:`Reason.MAX_WAITING`); or
- the oldest of them has waited longer than the limit (``headroom`` times
  ``ttft_budget_s``): the pools are behind right now (:attr:`Reason.OLDEST_WAIT`); or
- the rate is known (at least ``min_samples`` first tokens in the window) and the new
  request's predicted wait, the shortest recent wait (its own service) plus ``waiting /
  rate`` for the queue ahead of it, is over ``predicted_share`` of the budget
  (:attr:`Reason.PREDICTED_WAIT`). The prediction is of a typical wait: in a burst the
  last admitted wait about twice as long (the engines slow as the batch grows), and a
  client on a busy host adds its own delay, so the share (0.35) is below ``headroom``.

A steady load the pools serve in time keeps few requests waiting, each briefly, so its
predicted wait stays near its real one and nothing is refused; a burst beyond capacity is
held to what the pools drain within the limit, and the rest is refused before it waits.
A rate measured while few requests waited under-rates pools that serve many at once; so
a queue one deeper than the deepest a recent request was served from in time is always
admitted (:meth:`Admission.proven_depth`): the depth probes upward while requests meet
the limit, and the prediction holds it once they stop. The depths are remembered for
``depth_window_s`` busy seconds (30), longer than the rate's window: a closed loop whose
clients finish together sends a burst every few seconds with stragglers between, and
the stragglers alone, one waiting at a time, would leave a rate that refuses the next
burst the pools served in time before (measured: 35 of 192 refused at c=64 with every
prompt remote, the admitted waiting 1.2 s at p99 of a 5 s budget). The oldest-wait rule
still holds the queue once requests stop meeting the limit.
``Retry-After`` is the measured time to drain the queue that is waiting now (at least
1 s); without a measured rate, ``retry_after_s``.

Serve's ``max_queued_requests`` bounds each deployment's queue behind this (a pool that
is full answers ``BackPressureError``, which the ingress also turns into a 503).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum

from app.config.deployment import AdmissionConfig


class Reason(StrEnum):
    """Why a request was refused (the ``reason`` label of the refusal counter)."""

    NOT_READY = "not_ready"  # a pool has no warm replica yet (app.api.readiness)
    MAX_WAITING = "max_waiting"
    OLDEST_WAIT = "oldest_wait"
    PREDICTED_WAIT = "predicted_wait"
    POOL_QUEUE_FULL = "pool_queue_full"  # Serve's max_queued_requests (BackPressureError)


class Overloaded(Exception):
    """The request is refused; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int, reason: Reason) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason


class Ticket:
    """One admitted request: call :meth:`parsed` once its body is read and valid (its
    wait counts from then), :meth:`first_token` once it has one, :meth:`done` at the end
    (each may be called more than once, in any order)."""

    def __init__(self, admission: Admission, number: int) -> None:
        self._admission = admission
        self._number = number

    def parsed(self, samples: int = 1) -> None:
        """The body is valid; it asks for ``samples`` engine requests (prompts times
        ``n``), each of which waits for a first token: it counts as that many waiting."""
        self._admission._parsed(self._number, samples)

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
        window_s: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
        predicted_share: float = 0.35,
        min_samples: int = 8,
        on_refuse: Callable[[Reason], None] | None = None,
        depth_window_s: float = 30.0,
    ) -> None:
        self.limit_s = headroom * ttft_budget_s
        self.ttft_budget_s = ttft_budget_s
        self.max_waiting = max_waiting
        self.retry_after_s = retry_after_s
        self.window_s = window_s
        self.depth_window_s = max(depth_window_s, window_s)
        self.clock = clock
        # The predicted wait is a typical one: admit while it is under this share of the
        # budget (0: no prediction).
        self.predicted_limit_s = predicted_share * ttft_budget_s
        self.min_samples = min_samples
        self.on_refuse = on_refuse
        self.shed = 0
        self._numbers = itertools.count()
        # admitted, no first token yet -> (since, how many waited ahead of it)
        self._waiting: dict[int, tuple[float, int]] = {}
        # admitted, body not read yet: they count as waiting, but a client that sends its
        # body slowly must not make the oldest wait look long
        self._parsing: set[int] = set()
        # admitted requests that asked for more than one sample -> the samples beyond one
        self._extra: dict[int, int] = {}
        # Busy time: seconds during which some admitted request waited, summed so far.
        self._busy_s = 0.0
        self._busy_since: float | None = None  # when the queue last became non-empty
        # Recent first tokens: (busy-time stamp, seconds waited, how many waited ahead).
        self._served: deque[tuple[float, float, int]] = deque()
        # First tokens served within the limit, longer: (busy-time stamp, depth served).
        self._depths: deque[tuple[float, int]] = deque()

    @classmethod
    def of(
        cls,
        config: AdmissionConfig,
        clock: Callable[[], float] = time.monotonic,
        on_refuse: Callable[[Reason], None] | None = None,
    ) -> Admission:
        """Admission by ``ingress.admission``'s rules."""
        return cls(
            config.ttft_budget_s,
            config.max_waiting,
            config.retry_after_s,
            config.headroom,
            clock=clock,
            predicted_share=config.predicted_share,
            on_refuse=on_refuse,
        )

    @property
    def waiting(self) -> int:
        """Engine requests waiting for a first token: one per admitted request, and one
        more per sample beyond the first that a request asked for."""
        return len(self._waiting) + sum(self._extra.values())

    @property
    def parsing(self) -> int:
        """Admitted requests whose body is still being read."""
        return len(self._parsing)

    def oldest_wait_s(self) -> float:
        """How long the longest-waiting admitted request has waited (0 when none)."""
        for number, (since, _) in self._waiting.items():
            if number not in self._parsing:
                return self.clock() - since
        return 0.0

    def drain_rate(self) -> float | None:
        """First tokens per busy second, from the spacing of those served in the last
        ``window_s`` busy seconds; None while fewer than ``min_samples`` were.

        Measured between the first and the last of them, so a stall before a batch of
        first tokens (a cold start, a restart) does not count as slow service: the
        oldest-wait rule judges a stall while it lasts.
        """
        self._forget_before(self._busy_now() - self.window_s)
        if len(self._served) < self.min_samples:
            return None
        span = self._served[-1][0] - self._served[0][0]
        return (len(self._served) - 1) / span if span > 0 else None

    def predicted_wait_s(self, rate: float) -> float:
        """How long a request admitted now would wait for its first token: the shortest
        recent wait (a request's own service, with no queue ahead) plus the queue ahead
        of it at ``rate``."""
        service = min(waited for _, waited, _ in self._served) if self._served else 0.0
        return service + self.waiting / rate

    def proven_depth(self) -> int:
        """The deepest queue a request was served from within the limit in the last
        ``depth_window_s`` busy seconds: how many waited ahead of it, plus one (0 when
        none was)."""
        horizon = self._busy_now() - self.depth_window_s
        while self._depths and self._depths[0][0] < horizon:
            self._depths.popleft()
        return max((depth for _, depth in self._depths), default=0)

    def admit(self, share: float = 1.0) -> Ticket:
        """A ticket for a new request, or :class:`Overloaded` (counted)."""
        refused = self.refusal(share)
        if refused is not None:
            raise self.count(refused)
        return self.enter()

    def enter(self) -> Ticket:
        """A ticket for a new request, unchecked: for a caller that has just asked
        :meth:`refusal` (the clock moves between two checks)."""
        number = next(self._numbers)
        now = self.clock()
        if not self._waiting:
            self._busy_since = now
        self._waiting[number] = (now, self.waiting)
        self._parsing.add(number)
        return Ticket(self, number)

    def _parsed(self, number: int, samples: int = 1) -> None:
        if number in self._parsing:
            self._parsing.discard(number)
            _, ahead = self._waiting.pop(number)
            self._waiting[number] = (self.clock(), ahead)  # waits from now, in order
            if samples > 1:
                self._extra[number] = samples - 1

    def refusal(self, share: float = 1.0) -> Overloaded | None:
        """The refusal a request arriving now would get, not counted yet (:meth:`count`
        counts it once it is sent), or None: it would be admitted.

        ``share``: the request's priority class's share of the limits (1: all of them): a
        lower class is refused once the queue, the oldest wait or the predicted wait
        reaches its share of each limit, so the higher classes keep the rest.
        """
        rate = self.drain_rate() if self.predicted_limit_s > 0 else None
        most = max(1, math.floor(self.max_waiting * share))
        if self.waiting >= most:
            return self._refusal(
                Reason.MAX_WAITING,
                f"{self.waiting} requests already wait for their first token"
                + (f" (this class is admitted while fewer than {most} wait)" if share < 1 else ""),
                rate,
            )
        oldest = self.oldest_wait_s()
        limit_s = self.limit_s * share
        if oldest > limit_s:
            return self._refusal(
                Reason.OLDEST_WAIT,
                f"requests wait {oldest:.1f} s for a first token (budget "
                f"{self.ttft_budget_s:g} s, admitting while under {limit_s:g} s)",
                rate,
            )
        predicted_limit_s = self.predicted_limit_s * share
        if (
            rate is not None
            and (predicted := self.predicted_wait_s(rate)) > predicted_limit_s
            and self.waiting > self.proven_depth() * share
        ):
            return self._refusal(
                Reason.PREDICTED_WAIT,
                f"{self.waiting} requests wait for a first token and the pools serve "
                f"{rate:.1f} a second: a new one would wait {predicted:.1f} s "
                f"(budget {self.ttft_budget_s:g} s, admitting under "
                f"{predicted_limit_s:g} s)",
                rate,
            )
        return None

    def count(self, refused: Overloaded) -> Overloaded:
        """Count a refusal that is being sent (the refusal counter, by reason); it."""
        self.shed += 1
        if self.on_refuse is not None:
            self.on_refuse(refused.reason)
        return refused

    def refuse(self, reason: Reason, why: str, retry_after_s: int | None = None) -> Overloaded:
        """Count a refusal decided elsewhere (not ready, a pool's queue full); the error."""
        retry = self.retry_after() if retry_after_s is None else retry_after_s
        return self.count(Overloaded(why, retry, reason))

    def retry_after(self, rate: float | None = None) -> int:
        """Seconds until the queue waiting now has drained, at the measured rate."""
        rate = rate if rate is not None else self.drain_rate()
        if rate is None:
            return self.retry_after_s
        return max(1, math.ceil(self.waiting / rate))

    def _busy_now(self) -> float:
        if self._busy_since is None:
            return self._busy_s
        return self._busy_s + self.clock() - self._busy_since

    def _forget_before(self, horizon: float) -> None:
        while self._served and self._served[0][0] < horizon:
            self._served.popleft()

    def _refusal(self, reason: Reason, why: str, rate: float | None) -> Overloaded:
        return Overloaded(f"server overloaded: {why}; retry later", self.retry_after(rate), reason)

    def _leave(self, number: int, served: bool) -> None:
        entry = self._waiting.pop(number, None)
        if entry is None:
            return
        self._parsing.discard(number)
        self._extra.pop(number, None)
        since, ahead = entry
        busy = self._busy_now()
        if not self._waiting and self._busy_since is not None:
            self._busy_s = busy
            self._busy_since = None
        if served:
            waited = self.clock() - since
            self._served.append((busy, waited, ahead))
            self._forget_before(busy - self.window_s)  # kept only as long as the window
            if waited <= self.limit_s:
                # Only a deeper queue than one kept raises the proven depth: drop those
                # it outdoes (the deque stays short and ordered by depth, deepest first).
                while self._depths and self._depths[-1][1] <= ahead + 1:
                    self._depths.pop()
                self._depths.append((busy, ahead + 1))
