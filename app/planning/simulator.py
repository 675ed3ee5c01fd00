"""A discrete-event model of a serving deployment, fed by measured engine costs.

Disaggregated (``prefill_replicas > 0``): a request joins the prefill replica with the
fewest queued tokens; an idle prefill replica takes the queue's head requests up to
``max_batch_tokens`` and finishes them together after ``prefill_s(tokens)``. Each prompt's
KV then crosses one shared FIFO link (``kv_bytes_per_token x prompt / link rate``; a rate
of 0 means free) and joins the decode replica with the fewest requests. A decode replica
runs steps back to back while it has work; a step admits waiting requests (up to
``max_num_seqs``), takes ``decode_step_s(batch, context)`` (its sequences' tokens of
context, prompt and output so far, lengthen it) and gives every request in it one token.
The first decode step makes the first token.

With ``local_prefill_below_tokens``, shorter prompts skip the prefill pool and are
prefilled on a decode replica as in colocated mode (splitserve's conditional
disaggregation); with ``max_prefill_backlog``, so is every prompt that arrives while that
many prefills are in flight (its router's backlog rule).

Colocated (``prefill_replicas == 0``): each replica mixes both in one step, as vLLM's
chunked prefill does: running requests decode one token each, and waiting prompts fill
the rest of the ``max_batch_tokens`` budget (a long prompt spans several steps); the step
takes ``step_s(batch, prefill tokens)`` (both curves' sum, the step's fixed cost counted
once), plus, for a prompt's later chunks, what their attention to its earlier ones adds
(:meth:`EngineProfile.chunk_attention_s`: a long prompt's chunks cost what the whole
prompt does), and a prompt whose prefill completes gets its first token at the end of
that step.

TTFT adds the profile's per-request ``overhead_s`` (and ``disaggregated_overhead_s``
for a request the prefill pool served), with an exponential tail of mean
``overhead_spread_s`` drawn for each request. The model is deliberately simple
(no preemption, no prefix cache, one link); tests hold it to closed-form queues first.

With ``Topology.frontend`` (:mod:`app.planning.frontend`), the serving path's CPU is a
few more servers, one per process: the ingress, which each request visits on arrival
(before it reaches a pool); each engine's replica, which a request visits before its
engine gets it, and each engine step as it ends (output processing; nothing waits on
it); and each streamed chunk goes from the replica through the ingress (and the client,
where it shares the host): a token counts as the client's when its chunk is through
(``RequestState.delivered``), and a stream's tokens are batched into chunks as the
replica does. With ``first_token_on_prefill``, a remote prefill's first token is
streamed from the prefill replica as it ends, and decode's first step repeats it. With
``Topology.cores`` (> 0) the engines and that server share so many cores: while more
steps and jobs run than there are cores, each advances at cores / running of real time,
re-divided whenever one starts or ends (processor sharing, as Linux's fair scheduler
does); where the engines fill every core, each runs at the profile's crowded speed
(:meth:`EngineProfile.crowded`). ``cores`` = 0: each engine has a core of its own and the
front end runs beside them.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEnd, FrontEndCost, SharedCores, Streams
from app.planning.sim_core import Clock, RequestState, SimRequest


@dataclass(frozen=True)
class Topology:
    prefill_replicas: int  # 0: colocated
    decode_replicas: int  # colocated: the number of replicas
    kv_bytes_per_token: int = 0
    link_gbps: float = 0.0  # 0: the transfer is free
    max_batch_tokens: int = 2048
    max_num_seqs: int = 64
    local_prefill_below_tokens: int = 0  # shorter prompts are prefilled on decode
    frontend: FrontEndCost | None = None  # None: the serving path costs no CPU
    cores: int = 0  # cores the engines and the front end share; 0: no contention
    # A remote prefill's engine samples the first token and it is streamed at once
    # (splitserve's ``router.first_token_on_prefill``); decode's first step repeats it
    # (dropped) and its second makes the answer's second token.
    first_token_on_prefill: bool = False
    # Prefills in flight beyond which a long prompt is prefilled on decode instead
    # (splitserve's ``router.max_prefill_backlog``, one ingress); 0: no limit.
    max_prefill_backlog: int = 0

    def __post_init__(self) -> None:
        if self.prefill_replicas < 0 or self.decode_replicas < 1:
            raise ValueError("need >= 0 prefill replicas and >= 1 decode replica")
        if self.cores < 0:
            raise ValueError("cores cannot be negative")

    @property
    def accelerators(self) -> int:
        return self.prefill_replicas + self.decode_replicas

    @property
    def crowded(self) -> bool:
        """Every core of the host runs an engine: each engine runs as the profile's
        crowded measurement found (:meth:`EngineProfile.crowded`)."""
        return 0 < self.cores <= self.accelerators

    @property
    def name(self) -> str:
        if self.prefill_replicas == 0:
            return f"colocated x{self.decode_replicas}"
        name = f"{self.prefill_replicas}P:{self.decode_replicas}D"
        if self.local_prefill_below_tokens:
            name += f" (< {self.local_prefill_below_tokens} local)"
        return name


@dataclass(frozen=True)
class SimOutcome:
    ttft: float
    tpot: float  # nan for a one-token output


class DecodeReplica:
    """Steps back to back while it has requests; colocated replicas also prefill."""

    def __init__(
        self,
        clock: Clock,
        profile: EngineProfile,
        topology: Topology,
        cpu: SharedCores | None = None,
        frontend: FrontEnd | None = None,
    ) -> None:
        self.clock, self.profile, self.topology = clock, profile, topology
        self.cpu = cpu or SharedCores(clock, 0)
        frontend = frontend or FrontEnd(clock, None, self.cpu)
        # The replica's own process: the generate call, its engine's output processing
        # once a step, each chunk's send; beside (not queued behind) the ingress's work.
        self.process = frontend.replica()
        self.stream = Streams(clock, frontend, self.process)
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self.arriving = 0  # requests still in the replica's process on their way in
        self.joining = 0  # requests prefilled (or joining) in the step under way
        self.busy = False
        self.busy_s = 0.0  # seconds spent stepping, steps counted as they start (at the
        # share of the cores they start with)

    @property
    def load(self) -> int:
        return self.arriving + len(self.waiting) + self.joining + len(self.running)

    def add(self, state: RequestState) -> None:
        cost = self.process.cost
        self.arriving += 1
        self.process.visit(cost.request_s if cost else 0.0, lambda: self._queue(state))

    def _queue(self, state: RequestState) -> None:
        self.arriving -= 1
        self.waiting.append(state)
        if not self.busy:
            self._step()

    def _step(self) -> None:
        budget = self.topology.max_batch_tokens - len(self.running)
        prefilling: list[tuple[RequestState, int]] = []
        while self.waiting and len(self.running) + len(prefilling) < self.topology.max_num_seqs:
            state = self.waiting[0]
            if state.prefill_left and budget <= 0:
                break
            take = min(state.prefill_left, budget)
            budget -= take
            prefilling.append((state, take))
            self.waiting.popleft()
        if not self.running and not prefilling:
            self.busy = False
            return
        self.busy = True
        self.joining = len(prefilling)
        prefill_tokens = sum(take for _, take in prefilling)
        # Requests whose KV arrived from a prefill pool decode in this step as well.
        arrived = [state for state, take in prefilling if take == 0]
        batch = len(self.running) + len(arrived)
        context = sum(s.request.prompt_tokens + s.tokens_out for s in self.running + arrived)
        seconds = self.profile.step_s(batch, prefill_tokens, context) + sum(
            self.profile.chunk_attention_s(state.request.prompt_tokens - state.prefill_left, take)
            for state, take in prefilling
        )
        decoding = list(self.running)
        self.busy_s += self.cpu.run(seconds, lambda: self._end(decoding, prefilling))

    def _end(
        self, decoding: list[RequestState], prefilling: list[tuple[RequestState, int]]
    ) -> None:
        self.process.step()
        self.joining = 0
        for state in decoding:
            state.tokens_out += 1
            state.token_times.append(self.clock.now)
        for state, take in prefilling:
            state.prefill_left -= take
            if state.prefill_left:
                self.waiting.appendleft(state)  # the rest of the prompt, next step
            elif state.first_sent and state.tokens_out == 1:
                state.first_sent = False  # its first step repeats the token sent (dropped)
                self.running.append(state)
            else:
                state.tokens_out += 1  # the step that ends a prefill samples a token
                state.token_times.append(self.clock.now)
                if state.tokens_out >= state.request.output_tokens:
                    self.stream.chunk(state, first=True, last=True)  # the only token
                else:
                    self.stream.chunk(state, first=True)
                    self.running.append(state)
        streams = len(self.running)
        stepped = {id(state) for state in decoding}
        still = []
        for state in self.running:
            if state.tokens_out >= state.request.output_tokens:
                self.stream.chunk(state, last=True)
                continue
            if id(state) in stepped:
                self.stream.token(state, streams)
            still.append(state)
        self.running[:] = still
        self._step()


class PrefillReplica:
    def __init__(
        self,
        clock: Clock,
        profile: EngineProfile,
        topology: Topology,
        done: Callable[[RequestState], None],
        cpu: SharedCores | None = None,
        frontend: FrontEnd | None = None,
    ) -> None:
        self.clock, self.profile, self.topology, self.done = clock, profile, topology, done
        self.cpu = cpu or SharedCores(clock, 0)
        frontend = frontend or FrontEnd(clock, None, self.cpu)
        self.process = frontend.replica()  # the prefill call, each step's output
        self.stream = Streams(clock, frontend, self.process)
        self.queue: deque[RequestState] = deque()
        self.queued_tokens = 0
        self.busy = False
        self.busy_s = 0.0  # seconds spent prefilling, batches counted as they start
        self.in_batch = 0  # requests in the batch being prefilled

    def add(self, state: RequestState) -> None:
        self.queued_tokens += state.request.prompt_tokens
        cost = self.process.cost
        self.process.visit(cost.remote_request_s if cost else 0.0, lambda: self._queue(state))

    def _queue(self, state: RequestState) -> None:
        self.queue.append(state)
        if not self.busy:
            self._start()

    def _start(self) -> None:
        if not self.queue:
            self.busy = False
            return
        batch = [self.queue.popleft()]
        tokens = batch[0].request.prompt_tokens
        while self.queue and tokens + self.queue[0].request.prompt_tokens <= (
            self.topology.max_batch_tokens
        ):
            batch.append(self.queue.popleft())
            tokens += batch[-1].request.prompt_tokens
        self.queued_tokens -= tokens
        self.in_batch = len(batch)
        self.busy = True
        self.busy_s += self.cpu.run(self.profile.prefill_s(tokens), lambda: self._end(batch))

    def _end(self, batch: list[RequestState]) -> None:
        self.process.step()
        self.in_batch = 0
        for state in batch:
            state.prefill_left = 0
            if self.topology.first_token_on_prefill:
                state.tokens_out = 1
                state.token_times.append(self.clock.now)
                if state.request.output_tokens <= 1:
                    self.stream.chunk(state, first=True, last=True)  # the whole answer
                else:
                    state.first_sent = True
                    self.stream.chunk(state, first=True)
            self.done(state)
        self._start()


class Link:
    """One FIFO link: a transfer starts when the previous one has finished."""

    def __init__(self, clock: Clock, topology: Topology) -> None:
        self.clock, self.topology = clock, topology
        self.free_at = 0.0

    def send(self, state: RequestState, arrive: Callable[[RequestState], None]) -> None:
        if self.topology.link_gbps <= 0:
            arrive(state)
            return
        nbytes = state.request.prompt_tokens * self.topology.kv_bytes_per_token
        start = max(self.clock.now, self.free_at)
        self.free_at = start + nbytes * 8 / (self.topology.link_gbps * 1e9)
        self.clock.at(self.free_at, lambda: arrive(state))


def simulate(
    requests: list[SimRequest], profile: EngineProfile, topology: Topology
) -> list[SimOutcome]:
    """TTFT and TPOT of every request, in the order given."""
    return outcomes(simulate_states(requests, profile, topology), profile)


def simulate_states(
    requests: list[SimRequest],
    profile: EngineProfile,
    topology: Topology,
    prefill_profile: EngineProfile | None = None,
) -> list[RequestState]:
    """Every request's state at the end (its first token, its end, each token's time as
    its engine made it), in the order given. ``prefill_profile``: the prefill pool's
    engines, where they differ from the others (default ``profile``)."""
    if topology.crowded:
        profile = profile.crowded()
        prefill_profile = prefill_profile.crowded() if prefill_profile else None
    clock = Clock()
    cpu = SharedCores(clock, topology.cores)
    frontend = FrontEnd(clock, topology.frontend, cpu)
    decoders = [
        DecodeReplica(clock, profile, topology, cpu, frontend)
        for _ in range(topology.decode_replicas)
    ]

    def to_decode(state: RequestState) -> None:
        min(decoders, key=lambda d: d.load).add(state)

    in_flight = [0]  # prefills sent to the prefill pool and not yet through

    def prefilled(state: RequestState) -> None:
        in_flight[0] -= 1
        if state.tokens_out < state.request.output_tokens:  # else its one token was all
            link.send(state, to_decode)

    link = Link(clock, topology)
    prefillers = [
        PrefillReplica(
            clock,
            prefill_profile or profile,
            topology,
            prefilled,
            cpu,
            frontend,
        )
        for _ in range(topology.prefill_replicas)
    ]
    states = [RequestState(r, r.prompt_tokens) for r in requests]

    def route(state: RequestState) -> None:
        if state.remote:
            min(prefillers, key=lambda p: p.queued_tokens).add(state)
        else:
            to_decode(state)

    def arrive(state: RequestState) -> None:
        long = state.request.prompt_tokens >= topology.local_prefill_below_tokens
        backlog = topology.max_prefill_backlog
        state.remote = bool(prefillers) and long and not (backlog and in_flight[0] >= backlog)
        in_flight[0] += state.remote
        frontend.arrive(state.remote, lambda: route(state))

    for state in states:
        clock.at(state.request.arrival, lambda s=state: arrive(s))  # type: ignore[misc]
    clock.run()
    return states


def outcomes(states: list[RequestState], profile: EngineProfile) -> list[SimOutcome]:
    """Each simulated request's TTFT (the serving path's overheads added) and TPOT."""
    found = []
    spread = random.Random(0)  # the same tail for every topology compared
    for state in states:
        overhead = profile.overhead_s + (profile.disaggregated_overhead_s if state.remote else 0)
        if profile.overhead_spread_s > 0:
            overhead += spread.expovariate(1 / profile.overhead_spread_s)
        ttft = state.first_token - state.request.arrival + overhead
        out = state.request.output_tokens
        tpot = (state.finished - state.first_token) / (out - 1) if out > 1 else math.nan
        found.append(SimOutcome(ttft, tpot))
    return found


def poisson_arrivals(
    rate: float, lengths: list[tuple[int, int]], seed: int = 0
) -> list[SimRequest]:
    """``lengths`` (prompt, output) arriving as a Poisson process of ``rate`` req/s."""
    rng = random.Random(seed)
    now = 0.0
    requests = []
    for prompt, output in lengths:
        now += rng.expovariate(rate)
        requests.append(SimRequest(now, prompt, output))
    return requests
