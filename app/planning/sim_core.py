"""The simulators' core: a request, its state as it goes through the pools, and the
event clock. :mod:`app.planning.simulator` (the pools), :mod:`app.planning.frontend`
(the serving path's CPU) and :mod:`app.planning.scaling_sim` (a scaling policy in the
loop) build on it."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimRequest:
    arrival: float
    prompt_tokens: int
    output_tokens: int


@dataclass(eq=False)  # each request is itself: compared (and found in lists) by identity
class RequestState:
    request: SimRequest
    prefill_left: int
    remote: bool = False  # prefilled by the prefill pool
    first_sent: bool = False  # its first token came from the prefill pool's engine
    tokens_out: int = 0
    first_token: float = math.nan
    finished: float = math.nan
    last_chunk: float = math.nan  # when the engine last handed a chunk on
    token_times: list[float] = field(default_factory=list)  # each token, as the engine makes it
    # Each token as the client gets it (its chunk through the front end), where the
    # front end is modelled; ``chunked``: the tokens handed on in a chunk so far.
    delivered: list[float] = field(default_factory=list)
    chunked: int = 0
    on_first_token: Callable[[], None] | None = None  # called as the first token is through


@dataclass
class Clock:
    events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)
    now: float = 0.0

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.counter), action))

    def run(self) -> None:
        while self.events:
            self.now, _, action = heapq.heappop(self.events)
            action()
