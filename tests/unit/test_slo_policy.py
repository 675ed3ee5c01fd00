"""The SLO policy's decisions on metric traces (app.scaling.slo_policy)."""

from __future__ import annotations

import math
from dataclasses import replace

from app.scaling.slo_policy import SloPolicy
from app.scaling.slo_signals import DECODE, PREFILL, PolicyParams, PoolSignals
from app.scaling.split_model import Split

PARAMS = PolicyParams(
    ttft_s=1.0, tpot_s=0.05, upscale_cooldown_s=10, downscale_delay_s=30, headroom=0.7
)


def pool(replicas=1, **fields) -> PoolSignals:
    return PoolSignals(replicas=replicas, min_replicas=1, max_replicas=4, **fields)


IDLE = pool()


def run(policy: SloPolicy, trace, start_s: float = 0.0, step_s: float = 5.0):
    """Feed (prefill, decode) signals tick by tick, following the policy's own counts;
    return the counts after each tick."""
    counts = []
    p_now, d_now = 1, 1
    for i, (prefill, decode) in enumerate(trace):
        prefill = PoolSignals(**{**prefill.__dict__, "replicas": p_now})
        decode = PoolSignals(**{**decode.__dict__, "replicas": d_now})
        decisions = policy.decide(prefill, decode, start_s + i * step_s)
        p_now, d_now = decisions[PREFILL].replicas, decisions[DECODE].replicas
        counts.append((p_now, d_now))
    return counts


def test_idle_pools_hold_at_min():
    decisions = SloPolicy(PARAMS).decide(IDLE, IDLE, 0.0)
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (1, 1)
    assert decisions[PREFILL].reason == "within targets"


def test_prefill_grows_when_ttft_runs_over_its_budget():
    # 0.3 s per prefill, 80% busy, p90 prefill TTFT 1.4 s against a 1 s target.
    busy = pool(requests_per_s=2.7, busy=0.8, ttft_s=1.4)
    decision = SloPolicy(PARAMS).decide(busy, IDLE, 0.0)[PREFILL]
    assert decision.replicas >= 2
    assert "over budget" in decision.reason


def test_prefill_is_sized_by_its_queueing_model():
    # S = 0.2 s per prompt, budget 1 s -> utilization at most 0.8 per replica;
    # 2.0 engine-seconds per second of work need ceil(2.0 / 0.8) = 3 replicas.
    decision = SloPolicy(PARAMS).decide(pool(2, requests_per_s=10, busy=2.0), IDLE, 0.0)[PREFILL]
    assert decision.replicas == 3
    assert "load needs 3" in decision.reason
    # from one replica, at most twice as many per decision (the signals lag)
    decision = SloPolicy(PARAMS).decide(pool(requests_per_s=10, busy=2.0), IDLE, 0.0)[PREFILL]
    assert decision.replicas == 2 and "load needs 3" in decision.reason


def test_prefill_is_sized_from_the_prompts_arriving_not_only_the_work_served():
    # Two replicas busy all the time (busy 2.0 is all they can serve) while prompt tokens
    # arrive at twice the rate they prefill: 4 engine-seconds per second are asked for,
    # ceil(4 / 0.8) = 5 replicas, where busy alone would say 3.
    saturated = pool(2, requests_per_s=10, busy=2.0)
    behind = replace(saturated, arrived_tokens_per_s=20_000, prefilled_tokens_per_s=10_000)
    assert SloPolicy(PARAMS).prefill_needed(saturated, 1.0) == 3
    assert SloPolicy(PARAMS).prefill_needed(behind, 1.0) == 5
    decision = SloPolicy(PARAMS).decide(behind, IDLE, 0.0)[PREFILL]
    assert decision.replicas == 4 and "4.00 engine-s/s" in decision.reason  # at most 2x
    # Arrivals below what was prefilled (a queue draining) do not shrink the estimate.
    draining = replace(saturated, arrived_tokens_per_s=5_000, prefilled_tokens_per_s=10_000)
    assert SloPolicy(PARAMS).prefill_needed(draining, 1.0) == 3


def test_a_pool_that_just_shrank_grows_again_at_once():
    # The upscale cool-down counts from the last growth, not from a shrink: a burst
    # right after a downscale is met at once.
    policy = SloPolicy(PARAMS)
    calm = pool(2, requests_per_s=1, busy=0.1, ttft_s=0.1)
    now = 0.0
    while policy.decide(calm, IDLE, now)[PREFILL].replicas == 2:
        now += 5
    burst = pool(1, requests_per_s=10, busy=1.0, ttft_s=2.0)
    assert policy.decide(burst, IDLE, now + 5)[PREFILL].replicas == 2


def test_decodes_share_of_ttft_tightens_the_prefill_budget():
    policy = SloPolicy(PARAMS)
    assert policy.ttft_budget_s(pool(ttft_s=0.4)) == 0.6
    # S = 0.25 s; with the whole 1 s budget utilization 0.75 -> 1 replica holds 0.7 busy;
    # with decode taking 0.5 s, utilization 0.5 -> 2 replicas.
    prefill = pool(requests_per_s=2.8, busy=0.7)
    assert policy.prefill_needed(prefill, policy.ttft_budget_s(IDLE)) == 1
    assert policy.prefill_needed(prefill, policy.ttft_budget_s(pool(ttft_s=0.5))) == 2


def test_decode_grows_on_tpot_and_not_on_prefill_load():
    slow = pool(tpot_s=0.08, running=20)
    decisions = SloPolicy(PARAMS).decide(IDLE, slow, 0.0)
    assert decisions[DECODE].replicas == math.ceil(0.08 / 0.05)
    assert "TPOT" in decisions[DECODE].reason
    assert decisions[PREFILL].replicas == 1


def test_decode_grows_on_kv_usage_or_waiting_requests():
    assert SloPolicy(PARAMS).decide(IDLE, pool(kv_usage=0.9), 0.0)[DECODE].replicas == 2
    assert SloPolicy(PARAMS).decide(IDLE, pool(waiting=3), 0.0)[DECODE].replicas == 2
    # one request between two steps is not a queue
    assert SloPolicy(PARAMS).decide(IDLE, pool(waiting=0.5), 0.0)[DECODE].replicas == 1


def test_growth_waits_out_the_cooldown_and_respects_max():
    policy = SloPolicy(PARAMS)
    hot = pool(tpot_s=0.2, running=30)
    # 5 s ticks, 10 s cooldown: the proportional model asks for 4 at once; it doubles
    # per decision, 1 -> 2, cools down, 2 -> 4, and stays at max.
    counts = run(policy, [(IDLE, hot)] * 5)
    assert counts == [(1, 2), (1, 2), (1, 4), (1, 4), (1, 4)]
    capped = policy.decide(IDLE, pool(replicas=4, tpot_s=0.2), 100.0)[DECODE]
    assert capped.replicas == 4 and capped.reason.startswith("at max_replicas")

    policy = SloPolicy(PARAMS)
    warm = pool(tpot_s=0.06, running=10)
    counts = run(policy, [(IDLE, warm)] * 4)
    # grows 1 -> 2, cools down one tick (5 s < 10 s), grows again at 10 s
    assert counts[:3] == [(1, 2), (1, 2), (1, 3)]


def test_shrinks_one_step_after_a_calm_downscale_delay():
    policy = SloPolicy(PARAMS)
    busy = pool(requests_per_s=10, busy=2.0, ttft_s=0.3)
    counts = run(policy, [(busy, IDLE)] * 3 + [(IDLE, IDLE)] * 20)
    assert [c[0] for c in counts[:3]] == [2, 2, 3]
    # 30 s of calm after the last change (at 10 s; ticks of 5 s): one replica less, then
    # 30 s more.
    first_drop = next(i for i, c in enumerate(counts) if i > 2 and c[0] == 2)
    second_drop = next(i for i, c in enumerate(counts) if c[0] == 1)
    assert (first_drop - 2) * 5 >= 30
    assert (second_drop - first_drop) * 5 >= 30
    assert counts[-1] == (1, 1)


def test_no_shrink_while_the_smaller_pool_would_miss_the_target():
    policy = SloPolicy(PARAMS)
    # two decode replicas at 30 ms: one would run at ~60 ms > 0.7 * 50 ms
    steady = pool(tpot_s=0.03, running=16)
    trace = [(IDLE, steady)] * 30
    counts = []
    d_now = 2
    for i, (prefill, decode) in enumerate(trace):
        decode = PoolSignals(**{**decode.__dict__, "replicas": d_now})
        d_now = policy.decide(prefill, decode, i * 5.0)[DECODE].replicas
        counts.append(d_now)
    assert set(counts) == {2}


def test_a_load_burst_resets_the_downscale_clock():
    policy = SloPolicy(PARAMS)
    calm = pool(replicas=2)
    assert policy.decide(IDLE, calm, 0.0)[DECODE].replicas == 2
    assert policy.decide(IDLE, pool(replicas=2, tpot_s=0.04), 20.0)[DECODE].replicas == 2
    # calm again from 25 s: the delay counts from there, not from 0 s
    assert policy.decide(IDLE, calm, 25.0)[DECODE].replicas == 2
    assert policy.decide(IDLE, calm, 50.0)[DECODE].replicas == 2
    assert policy.decide(IDLE, calm, 55.0)[DECODE].replicas == 1


def test_the_ratio_bounds_grow_the_smaller_pool():
    params = PolicyParams(ttft_s=1.0, tpot_s=0.05, max_prefill_per_decode=1.0)
    busy = pool(2, requests_per_s=10, busy=2.0)
    decisions = SloPolicy(params).decide(busy, IDLE, 0.0)
    assert decisions[PREFILL].replicas == 3
    assert decisions[DECODE].replicas == 3
    assert "at most 1" in decisions[DECODE].reason


def test_colocated_pool_answers_for_ttft_too():
    decisions = SloPolicy(PARAMS).decide(None, pool(ttft_s=2.0), 0.0)
    assert set(decisions) == {DECODE}
    assert decisions[DECODE].replicas == 2 and "TTFT" in decisions[DECODE].reason


def test_decode_grows_when_its_share_of_ttft_runs_over():
    # KV arrival + first step (or local prefills) taking 700 ms of a 1 s target: decode
    # is short, and prefill's budget counts decode's share only up to half the target.
    slow_first = pool(ttft_s=0.7, requests_per_s=5, busy=0.9)
    decisions = SloPolicy(PARAMS).decide(IDLE, slow_first, 0.0)
    assert decisions[DECODE].replicas == 2 and "decode's TTFT 700 ms over 500 ms" in (
        decisions[DECODE].reason
    )
    assert SloPolicy(PARAMS).ttft_budget_s(slow_first) == 0.5
    # An idle decode engine's slow first token is the KV's arrival: more decode won't help.
    waiting_on_kv = pool(ttft_s=0.7, requests_per_s=5, busy=0.1)
    assert SloPolicy(PARAMS).decide(IDLE, waiting_on_kv, 0.0)[DECODE].replicas == 1


def test_within_a_cluster_the_pool_missing_its_target_is_served_first():
    params = PolicyParams(ttft_s=1.0, tpot_s=0.05, upscale_cooldown_s=0, max_total_replicas=4)
    # prefill has 3 replicas keeping up easily (busy 0.6: its floor is 1); decode misses TPOT
    prefill = pool(3, requests_per_s=6, busy=0.6, ttft_s=0.3)
    decode = pool(1, tpot_s=0.2, running=40)
    decisions = SloPolicy(params).decide(prefill, decode, 0.0)
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (2, 2)
    assert "decode needs room" in decisions[PREFILL].reason


def test_replicas_still_starting_count_as_capacity_on_their_way():
    # Prefill asked for a second replica; it is still starting, so the one serving
    # reports TTFT 1.4 s over its 1 s budget (the backlog the second will take). The
    # measured one, scaled by 1.4, needs 2: the replica on its way covers it.
    policy = SloPolicy(replace(PARAMS, upscale_cooldown_s=0))
    waiting = pool(2, serving=1, requests_per_s=2.7, busy=0.8, ttft_s=1.4)
    decision = policy.decide(waiting, IDLE, 0.0)[PREFILL]
    assert decision.replicas == 2 and decision.reason.startswith("1 starting: prefill TTFT")
    # Once it serves, the same figures (now measured on both) grow the pool.
    assert policy.decide(replace(waiting, serving=2), IDLE, 5.0)[PREFILL].replicas == 3
    # Far over (3.5x on the one serving): past the starting one, within 2x per decision.
    far = replace(waiting, ttft_s=3.5)
    assert SloPolicy(PARAMS).decide(far, IDLE, 0.0)[PREFILL].replicas == 4
    # Decode: TPOT twice the target on 2 serving of 4 asked for needs 4: hold.
    slow = pool(4, serving=2, tpot_s=0.1, running=32)
    decision = policy.decide(IDLE, slow, 0.0)[DECODE]
    assert decision.replicas == 4 and decision.reason.startswith("2 starting: TPOT")
    # The prefill load rule counts arrivals, not the replicas serving: 2.0 engine-s/s
    # at S = 0.2 s need 3 however many are still starting.
    loaded = pool(2, serving=1, requests_per_s=10, busy=2.0)
    assert SloPolicy(PARAMS).decide(loaded, IDLE, 0.0)[PREFILL].replicas == 3


def test_no_trade_between_the_pools_while_replicas_are_starting():
    params = PolicyParams(ttft_s=1.0, tpot_s=0.05, upscale_cooldown_s=0, max_total_replicas=4)
    prefill = pool(3, requests_per_s=6, busy=0.6, ttft_s=0.3)
    decode = pool(1, tpot_s=0.2, running=40)
    # The trade of the test above waits while a prefill replica is still starting ...
    decisions = SloPolicy(params).decide(replace(prefill, serving=2), decode, 0.0)
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (3, 1)
    assert "trading waits for 1 starting" in decisions[DECODE].reason
    # ... and while decode's own is: 1 of its 2 serves at TPOT 4x over, it asks for 4
    # (2x per decision) and keeps its 2; prefill gives back nothing.
    decisions = SloPolicy(params).decide(
        replace(prefill, replicas=2), replace(decode, replicas=2, serving=1), 0.0
    )
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (2, 2)
    assert "trading waits for 1 starting" in decisions[DECODE].reason
    # Once every replica serves, the trade goes ahead.
    decisions = SloPolicy(params).decide(
        replace(prefill, replicas=2), replace(decode, replicas=2), 0.0
    )
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (1, 3)
    # A pool just over its target (TPOT 1.2x; a trade needs 1/headroom = 1.43x) grows
    # only into free room: none here, so nothing moves.
    near = replace(decode, replicas=2, tpot_s=0.06)
    decisions = SloPolicy(params).decide(replace(prefill, replicas=2), near, 0.0)
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (2, 2)
    assert "decode 1.20x its target: a trade needs 1.43x" in decisions[DECODE].reason


# --- the model's check (a Split for the front door's demand) ---


def split(prefill: int, decode: int, meets: bool = True) -> Split:
    return Split(prefill, decode, 0.95 if meets else 0.6, meets, requests_per_s=40.0)


def test_the_models_split_grows_both_pools_at_once_past_the_doubling_bound():
    # The pools' own figures look calm (the signals lag the arrivals); the model says
    # the load arriving needs 4P:3D.
    big = PoolSignals(replicas=1, min_replicas=1, max_replicas=8)
    decisions = SloPolicy(PARAMS).decide(big, big, 0.0, split(4, 3))
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (4, 3)
    assert "40.0 req/s arriving need 4P:3D" in decisions[PREFILL].reason
    # without the model the same figures hold
    decisions = SloPolicy(PARAMS).decide(big, big, 0.0)
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (1, 1)


def test_the_model_waits_out_the_cooldown_and_respects_max():
    policy = SloPolicy(PARAMS)
    policy.decide(pool(2), pool(1), 0.0, split(2, 1))
    policy.memory[PREFILL].last_growth_s = 0.0
    decision = policy.decide(pool(2), pool(1), 5.0, split(3, 1))[PREFILL]
    assert decision.replicas == 2 and decision.reason.startswith("cooling down")
    decision = policy.decide(pool(2), pool(1), 10.0, split(7, 1))[PREFILL]
    assert decision.replicas == 4  # max_replicas


def test_no_pool_shrinks_below_the_models_split():
    policy = SloPolicy(PARAMS)
    calm = pool(replicas=3)
    counts, reasons = [], []
    p_now = 3
    for i in range(20):  # 100 s of calm figures: without the model, 3 -> 2 -> 1
        prefill = PoolSignals(**{**calm.__dict__, "replicas": p_now})
        decisions = policy.decide(prefill, IDLE, i * 5.0, split(2, 1))
        p_now = decisions[PREFILL].replicas
        counts.append(p_now)
        reasons.append(decisions[PREFILL].reason)
    assert counts[-1] == 2 and min(counts) == 2
    assert any(r.startswith("held: the model: 40.0 req/s arriving need 2P:1D") for r in reasons)


def test_at_the_cluster_cap_neither_pool_gives_back_below_the_models_split():
    params = replace(PARAMS, upscale_cooldown_s=0, max_total_replicas=6)
    # decode misses TPOT badly and asks for 6; prefill keeps up with 3 (its own floor
    # is 1), and the model says the arrivals need 3P:3D.
    prefill = pool(3, requests_per_s=6, busy=0.6, ttft_s=0.3)
    decode = PoolSignals(replicas=3, min_replicas=1, max_replicas=8, tpot_s=0.2, running=40)
    decisions = SloPolicy(params).decide(prefill, decode, 0.0, split(3, 3))
    assert (decisions[PREFILL].replicas, decisions[DECODE].replicas) == (3, 3)
    decisions = SloPolicy(params).decide(prefill, decode, 0.0)
    assert decisions[PREFILL].replicas < 3  # without the model prefill gives way


def test_more_load_than_any_split_meets_is_said_plainly():
    big = PoolSignals(replicas=1, min_replicas=1, max_replicas=8)
    decision = SloPolicy(PARAMS).decide(big, big, 0.0, split(5, 3, meets=False))[PREFILL]
    assert decision.replicas == 5
    assert "more than any split meets; 5P:3D serves as many as any (60%)" in decision.reason


def test_measured_rules_still_grow_a_pool_the_model_undersizes():
    # the model says 1P:1D, but decode's measured TPOT is twice its target
    decode = pool(2, tpot_s=0.1, running=32)
    decisions = SloPolicy(PARAMS).decide(IDLE, decode, 0.0, split(1, 1))
    assert decisions[DECODE].replicas == 4 and "TPOT" in decisions[DECODE].reason
