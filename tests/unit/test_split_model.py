"""The planner's model as the SLO policy's check (app.scaling.split_model)."""

from __future__ import annotations

import pytest

from app.planning.engine_profile import EngineProfile
from app.planning.goodput import SLO
from app.planning.planner_split import PlannerSplitModel, ServingShape
from app.scaling.demand import Demand
from app.scaling.split_model import Split

# An engine that prefills 1,000 tokens in 0.1 s and steps a batch in 10-20 ms.
PROFILE = EngineProfile(prefill=[(0, 0.0), (1000, 0.1)], decode=[(1, 0.010), (64, 0.020)])
SLO_ = SLO(ttft_s=0.5, tpot_s=0.03)
SHAPE = ServingShape(local_prefill_below_tokens=512)


def demand(rate: float, remote_prompt=2000, remote_output=4, local_output=4) -> Demand:
    return Demand(rate, 1.0, remote_prompt, remote_output, 100, local_output)


def model() -> PlannerSplitModel:
    return PlannerSplitModel(PROFILE, SLO_, 0.9, SHAPE, duration_s=30)


def test_long_prompts_with_short_answers_need_prefill_more_than_decode():
    # 2,000-token prompts take 0.2 s each: 12 req/s is 2.4 prefill engines of work,
    # while their 4 output tokens barely load a decode engine.
    split = model().split(demand(12), most=8)
    assert split.meets
    assert split.prefill >= 3 and split.decode == 1


def test_long_answers_need_decode_more_than_prefill():
    # Short remote prompts (600 tokens, 60 ms) with 400 output tokens: 20 req/s hold
    # 20 x 400 x ~15 ms = 120 streams at once, beyond one engine's 64-sequence batch.
    load = Demand(20, 1.0, 600, 400, 100, 4)
    split = model().split(load, most=8)
    assert split.meets
    assert split.decode > split.prefill


def test_more_load_never_needs_fewer_replicas_and_too_much_says_so():
    m = model()
    totals = [m.split(demand(rate), most=8) for rate in (2, 6, 12, 24)]
    sizes = [s.prefill + s.decode for s in totals]
    assert sizes == sorted(sizes) and sizes[0] == 2
    # 30 req/s are 6 engines of prefill work: 7P:1D serves the most, and not enough.
    beyond = m.split(demand(30), most=8)
    assert not beyond.meets and 0.5 < beyond.attainment < 0.9
    assert beyond.name == "7P:1D"


def test_a_target_no_size_meets_does_not_fill_the_cluster():
    # Every decode step takes at least 10 ms: a 5 ms TPOT is missed at any size.
    m = PlannerSplitModel(PROFILE, SLO(ttft_s=0.5, tpot_s=0.005), 0.9, SHAPE, duration_s=30)
    split = m.split(demand(2, remote_output=100), most=8)
    assert not split.meets and split.attainment == 0.0
    assert split.name == "1P:1D"


def test_among_splits_that_meet_it_keeps_nearest_the_current_pools():
    # Where several splits of the fewest replicas meet the target, a noisy demand must
    # not swap replicas between the pools: the answer is the one nearest the pools now.
    m = model()
    load = demand(12)
    m.split(load, most=8)  # the search for this demand, cached
    (key,) = m._cache
    m._cache[key] = [Split(2, 3, 0.95, True), Split(3, 2, 0.97, True), Split(1, 4, 0.5, False)]
    assert m.split(load, 8, current=(2, 4)).name == "2P:3D"
    assert m.split(load, 8, current=(4, 1)).name == "3P:2D"
    assert m.split(load, 8).name == "3P:2D"  # no current split: the higher attainment


def test_a_demand_it_has_seen_is_answered_from_its_cache():
    m = model()
    calls = []
    predict = m._predict

    def counting(*args):
        calls.append(args[1:])
        return predict(*args)

    m._predict = counting  # type: ignore[method-assign]
    first = m.split(demand(12), most=8)
    searched = len(calls)
    assert searched > 0
    # within the 5% rounding: the same answer, no new search
    again = m.split(demand(12.2), most=8)
    assert len(calls) == searched
    assert again.name == first.name and again.requests_per_s == 12.2


def test_an_idle_front_door_needs_one_of_each_and_fewer_than_two_is_refused():
    assert model().split(demand(0), most=4).name == "1P:1D"
    with pytest.raises(ValueError, match="at least 2"):
        model().split(demand(1), most=1)
