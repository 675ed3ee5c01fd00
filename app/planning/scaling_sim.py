"""The SLO autoscaling policy in the loop of the serving simulator.

:func:`simulate_scaling` runs a workload through the discrete-event model of
:mod:`app.planning.simulator` while pools change size: every ``tick_s`` it works out each
pool's figures over the last ``window_s`` as the replicas report them on a real cluster
(:mod:`app.scaling.autoscaling_stats`: requests per second, busy share, TTFT and TPOT at the
policy's percentile, running and waiting requests), asks
:class:`app.scaling.slo_policy.SloPolicy`, and applies the decision:

- a new replica takes work ``startup_s`` after the decision (weights loaded, warm), and
  its accelerators count from the decision;
- a removed replica takes no new work, finishes what it holds, and counts until then;
- ``max_total_replicas`` caps the two pools together: a replica the cluster has no room
  for is not started (on Ray it would wait, pending, for room).

With ``admission`` the ingress's own admission control (:class:`app.api.admission.Admission`,
one ingress replica, on the simulated clock) sheds arrivals, which count as misses.
The policy is :class:`app.scaling.slo_policy.SloPolicy` or Serve's default
(:class:`app.planning.serve_default.OngoingRequestsPolicy`). KV usage is not
modelled (the simulator has no KV capacity): the policy sees 0. Each replica-second
counts ``accelerators_per_replica`` accelerator-seconds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from app.api.admission import Admission, Overloaded
from app.config import AdmissionConfig
from app.planning.engine_profile import EngineProfile
from app.planning.goodput import SLO, attainment
from app.planning.sim_core import Clock, RequestState, SimRequest
from app.planning.simulator import (
    DecodeReplica,
    Link,
    PrefillReplica,
    SimOutcome,
    Topology,
    outcomes,
)
from app.scaling.demand import Demand, demand_figures
from app.scaling.slo_signals import DECODE, PREFILL, Decision, PoolSignals
from app.scaling.split_model import Split, SplitModel


class ScalingPolicy(Protocol):
    def decide(
        self,
        prefill: PoolSignals | None,
        decode: PoolSignals,
        now_s: float,
        split: Split | None = None,
    ) -> dict[str, Decision]: ...


@dataclass(frozen=True)
class ScalingConfig:
    start: tuple[int, int]  # (prefill, decode) replicas at t = 0
    bounds: tuple[int, int] = (1, 8)  # per pool (min, max)
    accelerators_per_replica: int = 2
    tick_s: float = 10.0
    window_s: float = 10.0
    startup_s: float = 60.0
    percentile: float = 90.0
    max_total_replicas: int | None = None  # the cluster's room for both pools
    admission: AdmissionConfig | None = None  # the ingress's load shedding; None: none


@dataclass
class ScalingRun:
    outcomes: list[SimOutcome]
    accelerator_seconds: float
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (t, P, D) active
    shed: int = 0  # arrivals admission control refused (misses in the attainment)
    splits: list[tuple[float, Split]] = field(default_factory=list)  # the model's, by tick

    def attainment(self, slo: SLO) -> float:
        return attainment(self.outcomes, slo)


Replica = PrefillReplica | DecodeReplica
R = TypeVar("R", PrefillReplica, DecodeReplica)


@dataclass
class _Pool(Generic[R]):
    """Replicas that take work, replicas on their way, and replicas draining."""

    active: list[R] = field(default_factory=list)
    starting: int = 0
    draining: list[R] = field(default_factory=list)

    @property
    def target(self) -> int:
        return len(self.active) + self.starting


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def simulate_scaling(
    requests: list[SimRequest],
    profile: EngineProfile,
    topology: Topology,
    config: ScalingConfig,
    policy: ScalingPolicy | None,
    model: SplitModel | None = None,
) -> ScalingRun:
    """Every request's outcome (in the order given), with ``policy`` resizing the
    pools (None: they stay at ``config.start``); with ``model``, the policy also gets
    the split the model says the front door's demand needs."""
    clock = Clock()
    prefill: _Pool[PrefillReplica] = _Pool()
    decode: _Pool[DecodeReplica] = _Pool()
    states = [RequestState(r, r.prompt_tokens) for r in requests]
    prefilled_at: dict[int, float] = {}
    link = Link(clock, topology)

    def to_decode(state: RequestState) -> None:
        min(decode.active, key=lambda d: d.load).add(state)

    def prefill_done(state: RequestState) -> None:
        prefilled_at[id(state)] = clock.now
        link.send(state, to_decode)

    def new_prefill() -> PrefillReplica:
        return PrefillReplica(clock, profile, topology, prefill_done)

    def new_decode() -> DecodeReplica:
        return DecodeReplica(clock, profile, topology)

    prefill.active = [new_prefill() for _ in range(config.start[0])]
    decode.active = [new_decode() for _ in range(config.start[1])]

    admission = None
    if config.admission is not None:
        admission = Admission.of(config.admission, clock=lambda: clock.now)

    def arrive(state: RequestState) -> None:
        if admission is not None:
            try:
                ticket = admission.admit()
                ticket.parsed()  # (the simulator has no request bodies to read)
                state.on_first_token = ticket.first_token
            except Overloaded:
                state.first_token = state.finished = math.inf  # a 503: a miss
                return
        if prefill.active and state.request.prompt_tokens >= topology.local_prefill_below_tokens:
            state.remote = True
            min(prefill.active, key=lambda p: p.queued_tokens).add(state)
        else:
            to_decode(state)

    for state in states:
        clock.at(state.request.arrival, lambda s=state: arrive(s))  # type: ignore[misc]

    end = max((r.arrival for r in requests), default=0.0)
    run = ScalingRun([], 0.0)
    replica_seconds = [0.0]
    last_tick = [0.0]
    busy_seen: dict[int, float] = {}

    def account(now: float) -> None:
        counted = sum(p.target + len(p.draining) for p in (prefill, decode))
        replica_seconds[0] += counted * (now - last_tick[0])
        last_tick[0] = now
        prefill.draining = [r for r in prefill.draining if _holds_work(r)]
        decode.draining = [r for r in decode.draining if _holds_work(r)]

    def signals(now: float) -> tuple[PoolSignals, PoolSignals]:
        # Rates and busy share over the last tick; percentiles over the window.
        since, recent = now - config.window_s, now - config.tick_s
        q = config.percentile / 100
        remote_done = [
            s for s in states if s.remote and since < prefilled_at.get(id(s), -math.inf) <= now
        ]
        remote_recent = [s for s in remote_done if prefilled_at[id(s)] > recent]
        # Prompt tokens that reached the prefill pool in the last tick, and that it
        # prefilled (as replicas count them on a real cluster).
        arrived = sum(
            s.request.prompt_tokens
            for s in states
            if s.remote and recent < s.request.arrival <= now
        )
        prefilled = sum(s.request.prompt_tokens for s in remote_recent)
        busy = {PREFILL: 0.0, DECODE: 0.0}
        replicas: list[tuple[str, Replica]] = [
            *((PREFILL, r) for r in prefill.active + prefill.draining),
            *((DECODE, r) for r in decode.active + decode.draining),
        ]
        for pool, replica in replicas:
            total = replica.busy_s
            busy[pool] += total - busy_seen.get(id(replica), 0.0)
            busy_seen[id(replica)] = total
        first = [s for s in states if since < s.first_token <= now]
        finished = [s for s in states if since < s.finished <= now and s.request.output_tokens > 1]
        decode_ttft = [s.first_token - prefilled_at.get(id(s), s.request.arrival) for s in first]
        pools = config.bounds
        running = sum(len(d.running) for d in decode.active)
        # Waiting for a batch slot: on replicas whose batch is full.
        waiting = sum(
            len(d.waiting) for d in decode.active if len(d.running) >= topology.max_num_seqs
        )
        p = PoolSignals(
            replicas=prefill.target,
            serving=len(prefill.active),
            min_replicas=pools[0],
            max_replicas=pools[1],
            requests_per_s=len(remote_recent) / config.tick_s,
            busy=busy[PREFILL] / config.tick_s,
            ongoing=sum(len(r.queue) + r.in_batch for r in prefill.active),
            arrived_tokens_per_s=arrived / config.tick_s,
            prefilled_tokens_per_s=prefilled / config.tick_s,
            ttft_s=_quantile([prefilled_at[id(s)] - s.request.arrival for s in remote_done], q),
        )
        d = PoolSignals(
            replicas=decode.target,
            serving=len(decode.active),
            min_replicas=pools[0],
            max_replicas=pools[1],
            requests_per_s=len(first) / config.window_s,
            busy=busy[DECODE] / config.tick_s,
            ttft_s=_quantile(decode_ttft, q),
            tpot_s=_quantile(
                [(s.finished - s.first_token) / (s.request.output_tokens - 1) for s in finished], q
            ),
            running=running,
            waiting=waiting,
            ongoing=sum(r.load for r in decode.active),
        )
        return p, d

    def demand(now: float) -> Demand | None:
        """What the ingress reports (app.scaling.demand): arrivals over the window, refused
        ones included, and the mix of the requests completed in it."""
        since = now - config.window_s
        arrived = sum(1 for s in states if since < s.request.arrival <= now)
        done = [
            (s.request.prompt_tokens, s.request.output_tokens, s.remote)
            for s in states
            if since < s.finished <= now
        ]
        return Demand.from_figures(demand_figures(arrived, done, config.window_s))

    def resize(pool: _Pool[R], make: Callable[[], R], wanted: int, now: float) -> None:
        def ready() -> None:
            pool.starting -= 1
            pool.active.append(make())

        room = math.inf
        if config.max_total_replicas is not None:
            room = config.max_total_replicas - prefill.target - decode.target
        while pool.target < wanted and room > 0:
            room -= 1
            pool.starting += 1
            clock.at(now + config.startup_s, ready)
        while pool.target > wanted and len(pool.active) > 1:
            idlest = min(pool.active, key=_load)
            pool.active.remove(idlest)
            pool.draining.append(idlest)

    def tick() -> None:
        now = clock.now
        account(now)
        p, d = signals(now)
        run.timeline.append((now, len(prefill.active), len(decode.active)))
        if policy is not None:
            split = None
            load = demand(now) if model is not None else None
            if model is not None and load is not None:
                most = config.max_total_replicas or 2 * config.bounds[1]
                split = model.split(load, most, (prefill.target, decode.target))
                run.splits.append((now, split))
            decisions = policy.decide(p, d, now, split)
            wanted_p, wanted_d = decisions[PREFILL].replicas, decisions[DECODE].replicas
            # The pool that shrinks first: its room goes to the one that grows.
            if wanted_p - prefill.target > wanted_d - decode.target:
                resize(decode, new_decode, wanted_d, now)
                resize(prefill, new_prefill, wanted_p, now)
            else:
                resize(prefill, new_prefill, wanted_p, now)
                resize(decode, new_decode, wanted_d, now)
        replicas: list[Replica] = [*prefill.active, *decode.active]
        if now < end or any(_holds_work(r) for r in replicas):
            clock.at(now + config.tick_s, tick)

    clock.at(config.tick_s, tick)
    clock.run()
    run.accelerator_seconds = replica_seconds[0] * config.accelerators_per_replica
    run.shed = admission.shed if admission is not None else 0
    run.outcomes = outcomes(states, profile)
    return run


def _load(replica: Replica) -> float:
    if isinstance(replica, PrefillReplica):
        return replica.queued_tokens + (1 if replica.busy else 0)
    return replica.load


def _holds_work(replica: Replica) -> bool:
    if isinstance(replica, PrefillReplica):
        return replica.busy or bool(replica.queue)
    return replica.busy or replica.load > 0


def ramp_arrival_times(rng: random.Random, phases: Sequence[tuple[float, float]]) -> list[float]:
    """Poisson arrival times (s) through ``phases`` of (seconds, requests per second)."""
    times: list[float] = []
    start = 0.0
    for seconds, rate in phases:
        t = start + rng.expovariate(rate)
        while t < start + seconds:
            times.append(t)
            t += rng.expovariate(rate)
        start += seconds
    return times


def ramp_requests(
    phases: Sequence[tuple[float, float]],
    lengths: Callable[[int], tuple[int, int]],
    seed: int = 0,
) -> list[SimRequest]:
    """Requests arriving through ``phases``; ``lengths(i)`` gives the i-th one's (prompt,
    output) tokens."""
    times = ramp_arrival_times(random.Random(seed), phases)
    return [SimRequest(t, *lengths(i)) for i, t in enumerate(times)]
