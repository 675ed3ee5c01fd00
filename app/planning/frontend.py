"""What the serving path's front end costs in CPU, for the simulator to charge.

Every request, engine step and streamed chunk passes through Python processes: Serve's
proxy and the ingress, the replica that hosts each engine, and (in a load test on the
same host) the load generator. Where they run on the engines' cores (no core is left for
them), their CPU time is taken from the engines. The simulator
(:mod:`app.planning.simulator`) models each process as a FIFO server of its own: the
ingress (with Serve's proxy), one per engine replica, and the client where it shares the
host. A request visits the client, the ingress and its engine's replica on the way in;
each engine step is processed by its replica; each streamed chunk goes from the replica
through the ingress to the client, and its tokens count as delivered when it is through.
The servers and the engines share ``Topology.cores`` the way Linux's fair scheduler
shares a core: every runnable process gets an equal share, re-divided whenever one starts
or stops (:class:`SharedCores`), so the processes run in parallel where cores allow and
a chunk's path is a pipeline, not one queue.

The costs come from a run other than the one predicted
(:mod:`load_tests.planning.frontend_fit`): the front-end processes' CPU seconds over workloads
that differ in requests, remote prefills, chunks and engine steps, solved for the four
costs, in total and for the engines' replicas apart.
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
    # The parts of request_s, remote_request_s and chunk_s that the engine's own replica
    # process pays (the generate or prefill call, the chunk's send); the rest is the
    # ingress's and Serve's proxy's. 0: a fit that did not tell the processes apart.
    replica_request_s: float = 0.0
    replica_remote_request_s: float = 0.0
    replica_chunk_s: float = 0.0
    # The load generator runs on the same cores, a process of its own (:meth:`with_client`).
    client_on_host: bool = False

    def __post_init__(self) -> None:
        costs = (self.request_s, self.remote_request_s, self.chunk_s, self.step_s)
        replica = (self.replica_request_s, self.replica_remote_request_s, self.replica_chunk_s)
        if min(*costs, *replica, self.client_request_s, self.client_chunk_s) < 0:
            raise ValueError("front-end costs cannot be negative")
        if any(part > whole for part, whole in zip(replica, costs, strict=False)):
            raise ValueError("a replica's share of a cost cannot exceed the cost")

    @property
    def ingress(self) -> ProcessCost:
        """What the ingress (and Serve's proxy) pays."""
        return ProcessCost(
            self.request_s - self.replica_request_s,
            self.remote_request_s - self.replica_remote_request_s,
            self.chunk_s - self.replica_chunk_s,
        )

    @property
    def replica(self) -> ProcessCost:
        """What an engine's replica pays (every engine step's output processing too)."""
        return ProcessCost(
            self.replica_request_s,
            self.replica_remote_request_s,
            self.replica_chunk_s,
            self.step_s,
        )

    @property
    def client(self) -> ProcessCost:
        """What the load generator pays, where it shares the cores (else nothing)."""
        if not self.client_on_host:
            return ProcessCost()
        return ProcessCost(self.client_request_s, 0.0, self.client_chunk_s)

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
            # fits before 2026-12-07 did not tell the replicas' share apart
            replica_request_s=float(fitted.get("replica_request_s", 0.0)),
            replica_remote_request_s=float(fitted.get("replica_remote_request_s", 0.0)),
            replica_chunk_s=float(fitted.get("replica_chunk_s", 0.0)),
        )

    def with_client(self) -> FrontEndCost:
        """These costs with the load generator on the same cores, a process of its own: what
        a check on the load tests' own machine should model (their clients share its cores)."""
        return replace(self, client_on_host=True)

    def total(self) -> ProcessCost:
        """Every process's cost together (the client's where it shares the cores)."""
        parts = (self.ingress, self.replica, self.client)
        return ProcessCost(*(sum(values) for values in zip(*(p.costs for p in parts), strict=True)))


@dataclass(frozen=True)
class ProcessCost:
    """CPU one process of the serving path spends per request, remote request, chunk and
    engine step."""

    request_s: float = 0.0
    remote_request_s: float = 0.0
    chunk_s: float = 0.0
    step_s: float = 0.0

    @property
    def costs(self) -> tuple[float, float, float, float]:
        return (self.request_s, self.remote_request_s, self.chunk_s, self.step_s)

    def on_arrival(self, remote: bool) -> float:
        return self.request_s + self.remote_request_s * remote


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
    """One process of the serving path: a FIFO server that requests, engine steps and
    chunks visit (no cost: free and instant)."""

    def __init__(self, clock: Clock, cost: ProcessCost | None, cpu: SharedCores) -> None:
        self.clock, self.cost, self.cpu = clock, cost, cpu
        self.queue: deque[tuple[float, Callable[[], None]]] = deque()
        self.busy = False

    def visit(self, work_s: float, then: Callable[[], None]) -> None:
        if self.cost is None or (work_s <= 0 and not self.busy):
            then()  # nothing to do and nothing ahead of it
            return
        self.queue.append((work_s, then))
        if not self.busy:
            self._next()

    def arrival(self, remote: bool, then: Callable[[], None]) -> None:
        """A request passes through this process on its way in."""
        self.visit(self.cost.on_arrival(remote) if self.cost else 0.0, then)

    def chunk(self, then: Callable[[], None]) -> None:
        self.visit(self.cost.chunk_s if self.cost else 0.0, then)

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


class FrontEnd:
    """The serving path's processes of one simulated host: the ingress (with Serve's
    proxy), the load generator where it shares the cores, and a replica process per
    engine (:meth:`replica`)."""

    def __init__(self, clock: Clock, cost: FrontEndCost | None, cpu: SharedCores) -> None:
        self.clock, self.cost, self.cpu = clock, cost, cpu
        self.ingress = FrontEndServer(clock, cost.ingress if cost else None, cpu)
        self.client = FrontEndServer(clock, cost.client if cost else None, cpu)

    def replica(self) -> FrontEndServer:
        """A new engine replica's process."""
        return FrontEndServer(self.clock, self.cost.replica if self.cost else None, self.cpu)

    def arrive(self, remote: bool, then: Callable[[], None]) -> None:
        """A request sent: through the client and the ingress, then ``then`` (routing)."""
        self.client.arrival(remote, lambda: self.ingress.arrival(remote, then))


class Streams:
    """How a replica's tokens reach clients: in chunks, from the replica's process through
    the ingress and the client; a token counts as delivered when its chunk is through."""

    def __init__(self, clock: Clock, frontend: FrontEnd, replica: FrontEndServer) -> None:
        self.clock, self.frontend, self.replica = clock, frontend, replica

    def chunk(self, state: RequestState, first: bool = False, last: bool = False) -> None:
        """A chunk leaves the engine now (with the stream's first and/or last token)."""
        state.last_chunk = self.clock.now
        count, state.chunked = state.tokens_out - state.chunked, state.tokens_out

        def through() -> None:
            state.delivered.extend([self.clock.now] * count)
            if first:
                state.first_token = self.clock.now
                if state.on_first_token is not None:
                    state.on_first_token()
            if last:
                state.finished = self.clock.now

        ingress, client = self.frontend.ingress, self.frontend.client
        self.replica.chunk(lambda: ingress.chunk(lambda: client.chunk(through)))

    def token(self, state: RequestState, streams: int) -> None:
        """A token in the middle of a stream: a chunk once the stream's interval is up."""
        cost = self.frontend.cost
        if cost is None or self.clock.now - state.last_chunk < cost.chunk_interval_s(streams):
            return
        self.chunk(state)
