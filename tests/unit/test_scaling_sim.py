"""The SLO policy in the simulator's loop (app.planning.scaling_sim)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from app.config import AdmissionConfig
from app.planning.engine_profile import EngineProfile
from app.planning.goodput import SLO
from app.planning.planner_split import PlannerSplitModel
from app.planning.scaling_sim import ScalingConfig, ramp_requests, simulate_scaling
from app.planning.serve_default import OngoingRequestsPolicy
from app.planning.simulator import Topology, simulate
from app.scaling.slo_policy import SloPolicy
from app.scaling.slo_signals import DECODE, PolicyParams, PoolSignals

# Prefill: 20 ms + 0.1 ms per token; decode: 10 ms per step + 1 ms per sequence.
PROFILE = EngineProfile(prefill=[(0, 0.02), (10_000, 1.02)], decode=[(1, 0.011), (64, 0.074)])
TOPOLOGY = Topology(1, 1, max_num_seqs=64)
SLO_ = SLO(ttft_s=1.0, tpot_s=0.03)


def lengths(i: int) -> tuple[int, int]:
    return (2000, 4) if i % 4 == 0 else (200, 100)


def test_without_a_policy_it_is_the_fixed_simulator():
    requests = ramp_requests([(60, 4.0)], lengths, seed=1)
    fixed = simulate(requests, PROFILE, Topology(2, 3, max_num_seqs=64))
    run = simulate_scaling(
        requests, PROFILE, Topology(2, 3, max_num_seqs=64), ScalingConfig(start=(2, 3)), None
    )
    assert [o.ttft for o in fixed] == [o.ttft for o in run.outcomes]
    assert [o.tpot for o in fixed] == pytest.approx([o.tpot for o in run.outcomes], nan_ok=True)
    # 5 replicas x 2 accelerators, from 0 until the work is done (a tick after it).
    finished = max(r.arrival for r in requests)
    assert 10 * finished <= run.accelerator_seconds <= 10 * (finished + 60)


def test_the_policy_follows_a_ramp_up_and_down():
    phases = [(120, 2.0), (240, 12.0), (240, 2.0)]
    requests = ramp_requests(phases, lengths, seed=2)
    params = PolicyParams(
        ttft_s=SLO_.ttft_s,
        tpot_s=SLO_.tpot_s,
        upscale_cooldown_s=20,
        downscale_delay_s=60,
        max_total_replicas=8,
    )
    config = ScalingConfig(start=(1, 1), bounds=(1, 6), startup_s=30)
    scaled = simulate_scaling(requests, PROFILE, TOPOLOGY, config, SloPolicy(params))
    small = simulate_scaling(requests, PROFILE, TOPOLOGY, config, None)
    peak = max(p + d for _, p, d in scaled.timeline)
    at_end = scaled.timeline[-1]
    assert peak > 2, "the 6x step must grow the pools"
    assert at_end[1] + at_end[2] < peak, "and they must shrink after it"
    assert scaled.attainment(SLO_) > small.attainment(SLO_) + 0.1
    # cheaper than holding the peak size all along
    duration = scaled.timeline[-1][0]
    assert scaled.accelerator_seconds < peak * 2 * duration
    assert not any(math.isnan(o.ttft) for o in scaled.outcomes)


def test_admission_sheds_a_burst_and_the_cluster_cap_holds_back_new_replicas():
    # A 12 req/s step on one pair that may not grow: without shedding its queue grows
    # through the step; the ingress's own admission control refuses what would wait.
    requests = ramp_requests([(30, 2.0), (60, 12.0)], lengths, seed=3)
    config = ScalingConfig(start=(1, 1), startup_s=30, max_total_replicas=2)
    unbounded = simulate_scaling(requests, PROFILE, TOPOLOGY, config, None)
    admission = AdmissionConfig(ttft_budget_s=1.0)
    shedding = simulate_scaling(
        requests, PROFILE, TOPOLOGY, replace(config, admission=admission), None
    )
    assert unbounded.shed == 0 and shedding.shed > 0
    shed = [o for o in shedding.outcomes if math.isinf(o.ttft)]
    assert len(shed) == shedding.shed
    admitted = sorted(o.ttft for o in shedding.outcomes if not math.isinf(o.ttft))
    # Admitted requests wait about the budget at worst, not the backlog's length.
    admitted_p99 = admitted[int(0.99 * len(admitted))]
    assert admitted_p99 < 2 * admission.ttft_budget_s
    assert max(o.ttft for o in unbounded.outcomes) > 3 * admitted_p99
    # Serve's default policy asks for more decode replicas than the cluster holds.
    default = OngoingRequestsPolicy(target_ongoing_requests=2, upscale_delay_s=0)
    capped = simulate_scaling(requests, PROFILE, TOPOLOGY, replace(config, bounds=(1, 6)), default)
    assert max(p + d for _, p, d in capped.timeline) == 2


def test_serves_default_policy_follows_ongoing_requests_after_its_delays():
    policy = OngoingRequestsPolicy(
        target_ongoing_requests=2, upscale_delay_s=20, downscale_delay_s=60
    )
    busy = PoolSignals(replicas=1, max_replicas=8, ongoing=9)
    # 9 ongoing / 2 per replica: 5 replicas, once the wish has lasted the upscale delay
    assert policy.decide(None, busy, 0.0)[DECODE].replicas == 1
    assert policy.decide(None, busy, 10.0)[DECODE].replicas == 1
    assert policy.decide(None, busy, 20.0)[DECODE].replicas == 5
    quiet = PoolSignals(replicas=5, max_replicas=8, ongoing=1)
    assert policy.decide(None, quiet, 30.0)[DECODE].replicas == 5
    # a tick that wants no change resets the clock
    assert policy.decide(None, replace(quiet, ongoing=10), 60.0)[DECODE].replicas == 5
    assert policy.decide(None, quiet, 70.0)[DECODE].replicas == 5
    assert policy.decide(None, quiet, 130.0)[DECODE].replicas == 1
    # bounds
    assert policy.decide(None, replace(busy, ongoing=100), 200.0)[DECODE].replicas == 1
    assert policy.decide(None, replace(busy, ongoing=100), 220.0)[DECODE].replicas == 8


def test_the_models_check_sizes_the_pools_from_the_front_doors_demand():
    # A step from 1 to 12 req/s of long prompts (0.22 s of prefill each: 2.6 prefill
    # engines of work) with short answers. The policy alone grows prefill at most to
    # twice its size per decision, a cool-down apart; the model's split for the
    # ingress's demand (every arrival, refused ones included) goes there at once.
    requests = ramp_requests([(60, 1.0), (180, 12.0)], lambda i: (2000, 4), seed=4)
    params = PolicyParams(
        ttft_s=SLO_.ttft_s, tpot_s=SLO_.tpot_s, upscale_cooldown_s=30, max_total_replicas=8
    )
    config = ScalingConfig(
        start=(1, 1),
        bounds=(1, 6),
        startup_s=30,
        max_total_replicas=8,
        admission=AdmissionConfig(ttft_budget_s=1.0),
    )
    model = PlannerSplitModel(PROFILE, SLO_, 0.9, duration_s=30)
    checked = simulate_scaling(requests, PROFILE, TOPOLOGY, config, SloPolicy(params), model)
    alone = simulate_scaling(requests, PROFILE, TOPOLOGY, config, SloPolicy(params))
    after = [s for t, s in checked.splits if 70 <= t <= 120]
    assert after and all(s.requests_per_s > 9 and s.prefill >= 3 for s in after)

    def prefill_reached(run, size):
        return next(t for t, p, _ in run.timeline if p >= size)

    assert prefill_reached(checked, 3) + 30 <= prefill_reached(alone, 3)
    assert checked.attainment(SLO_) > alone.attainment(SLO_) + 0.03
    assert checked.shed < alone.shed
