"""What the serving path's front end costs in CPU, for the simulator to charge.

Every request, engine step and streamed chunk passes through Python processes: Serve's
proxy, the ingress, the replica that hosts each engine. Where they run on the engines'
cores (no core is left for them), their CPU time is taken from the engines. The simulator
(:mod:`app.planning.simulator`) models them as one FIFO server that each request visits on
arrival, each engine step as it ends, and each chunk on its way out, sharing
``Topology.cores`` with the engines the way Linux's fair scheduler shares a core: every
runnable process gets an equal share, re-divided whenever one starts or stops
(:class:`SharedCores`).

The costs come from a run other than the one predicted
(:mod:`load_tests.planning.frontend_fit`): the front-end processes' CPU seconds over workloads
that differ in requests, remote prefills, chunks and engine steps, solved for the four
costs.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.planning.sim_core import Clock, RequestState


@dataclass(frozen=True)
class FrontEndCost:
    request_s: float  # CPU per request: HTTP, tokenizing, routing, the decode call
    remote_request_s: float  # extra CPU per remotely prefilled request: the prefill hop
    chunk_s: float  # CPU per streamed chunk (replica, ingress, proxy)
    # How the decode replica batches tokens into chunks (the pool's stream settings):
    # each stream waits (streams on the replica) / messages_per_s between chunks, at most
    # max_interval_s.
    messages_per_s: float = 200.0
    max_interval_s: float = 0.05
    # The load generator's CPU, where its clients run on the same cores (a check against
    # local load tests); 0 for a user's deployment, whose clients run elsewhere.
    client_request_s: float = 0.0
    client_chunk_s: float = 0.0
    # CPU per engine step in the replica that hosts the engine (vLLM's output processing
    # runs once a step for every request in it): beside a step's share of chunks, where
    # a per-chunk cost alone charged a busy replica as if its streams were handled apart.
    step_s: float = 0.0

    def __post_init__(self) -> None:
        costs = (self.request_s, self.remote_request_s, self.chunk_s, self.step_s)
        if min(*costs, self.client_request_s, self.client_chunk_s) < 0:
            raise ValueError("front-end costs cannot be negative")

    def chunk_interval_s(self, streams: int) -> float:
        """The least time between two chunks of one stream, with ``streams`` on its replica."""
        if self.messages_per_s <= 0:
            return 0.0
        return min(self.max_interval_s, streams / self.messages_per_s)

    @classmethod
    def from_fit(cls, path: str | Path) -> FrontEndCost:
        """The costs a :mod:`load_tests.planning.frontend_fit` run wrote, streamed as the default
        config's decode pool streams."""
        from app.config import AppConfig

        fitted = json.loads(Path(path).read_text())
        decode = AppConfig().decode
        return cls(
            request_s=float(fitted["request_s"]),
            remote_request_s=float(fitted["remote_request_s"]),
            chunk_s=float(fitted["chunk_s"]),
            messages_per_s=decode.stream_messages_per_s,
            max_interval_s=decode.stream_interval_ms / 1000,
            client_request_s=float(fitted.get("client_request_s", 0.0)),
            client_chunk_s=float(fitted.get("client_chunk_s", 0.0)),
            step_s=float(fitted.get("step_s", 0.0)),  # fits before 2026-12-03 have none
        )

    def with_client(self) -> FrontEndCost:
        """These costs with the load generator's added in: the one CPU server a check on
        the load tests' own machine should model (their clients share its cores)."""
        return replace(
            self,
            request_s=self.request_s + self.client_request_s,
            chunk_s=self.chunk_s + self.client_chunk_s,
            client_request_s=0.0,
            client_chunk_s=0.0,
        )


# The simulator's side: the cores, the server, and the streams that visit it.


class SharedCores:
    """The cores the engines and the front end share, as processor sharing: while ``n``
    jobs (engine steps, front-end work) run on ``cores`` (n > cores), each advances at
    cores / n of real time, and every start or end re-divides the cores among those left
    (Linux's fair scheduler, at a granularity finer than any step). ``cores`` = 0: every
    job runs at full speed."""

    def __init__(self, clock: Clock, cores: int) -> None:
        self.clock, self.cores = clock, cores
        self.jobs: dict[int, _Job] = {}
        self.ids = itertools.count()
        self.updated = 0.0  # when the jobs' work left was last brought up to date

    def rate(self) -> float:
        """How fast each running job advances now (seconds of work per second)."""
        running = len(self.jobs)
        return 1.0 if not self.cores or running <= self.cores else self.cores / running

    def run(self, work_s: float, done: Callable[[], None]) -> float:
        """Start ``work_s`` of CPU; ``done`` is called when it is through. Returns the
        seconds it would take at the share it starts with."""
        if not self.cores:
            self.clock.at(self.clock.now + work_s, done)
            return work_s
        self._advance()
        self.jobs[next(self.ids)] = _Job(work_s, done)
        self._reschedule()
        return work_s / self.rate()

    def _advance(self) -> None:
        elapsed = (self.clock.now - self.updated) * self.rate()
        for job in self.jobs.values():
            job.left_s = max(job.left_s - elapsed, 0.0)
        self.updated = self.clock.now

    def _reschedule(self) -> None:
        """Each job's end at the share it now has (the events set before go stale)."""
        rate = self.rate()
        for key, job in self.jobs.items():
            job.generation += 1
            self.clock.at(self.clock.now + job.left_s / rate, self._ender(key, job.generation))

    def _ender(self, key: int, generation: int) -> Callable[[], None]:
        def end() -> None:
            job = self.jobs.get(key)
            if job is None or job.generation != generation:
                return  # rescheduled since
            self._advance()
            del self.jobs[key]
            self._reschedule()
            job.done()

        return end


@dataclass(eq=False)
class _Job:
    left_s: float  # CPU seconds of work left
    done: Callable[[], None]
    generation: int = 0  # bumped at each reschedule: only the newest end event counts


class FrontEndServer:
    """One FIFO server every request and streamed chunk visits (none: free and instant)."""

    def __init__(self, clock: Clock, cost: FrontEndCost | None, cpu: SharedCores) -> None:
        self.clock, self.cost, self.cpu = clock, cost, cpu
        self.queue: deque[tuple[float, Callable[[], None]]] = deque()
        self.busy = False

    def visit(self, work_s: float, then: Callable[[], None]) -> None:
        if self.cost is None:
            then()
            return
        self.queue.append((work_s, then))
        if not self.busy:
            self._next()

    def step(self) -> None:
        """An engine step ended: its output processing takes the server's time."""
        if self.cost is not None and self.cost.step_s > 0:
            self.visit(self.cost.step_s, lambda: None)

    def _next(self) -> None:
        self.busy = bool(self.queue)
        if not self.queue:
            return
        work_s, then = self.queue.popleft()

        def done() -> None:
            then()
            self._next()

        self.cpu.run(work_s, done)


class Streams:
    """How a decode replica's tokens reach clients: in chunks, through the front end; a
    token counts as delivered when its chunk is through."""

    def __init__(self, clock: Clock, frontend: FrontEndServer) -> None:
        self.clock, self.frontend = clock, frontend
        self.chunk_s = frontend.cost.chunk_s if frontend.cost else 0.0

    def chunk(self, state: RequestState, first: bool = False, last: bool = False) -> None:
        """A chunk leaves the engine now (with the stream's first and/or last token)."""
        state.last_chunk = self.clock.now

        def through() -> None:
            if first:
                state.first_token = self.clock.now
                if state.on_first_token is not None:
                    state.on_first_token()
            if last:
                state.finished = self.clock.now

        self.frontend.visit(self.chunk_s, through)

    def token(self, state: RequestState, streams: int) -> None:
        """A token in the middle of a stream: a chunk once the stream's interval is up."""
        cost = self.frontend.cost
        if cost is None or self.clock.now - state.last_chunk < cost.chunk_interval_s(streams):
            return
        self.chunk(state)
