"""SLO profiles, their margins, the goodput read off a ladder of rates, and the trace
advisor on layouts whose order is known."""

from __future__ import annotations

import pytest

from app.planning.engine_profile import EngineProfile
from app.planning.trace_advice import advise_trace, calibrated, ladder, layouts, simulated_streams
from app.replay.profiles import (
    PROFILES,
    REFERENCE_DECODE_STEP_S,
    REFERENCE_PREFILL_1K_S,
    SloProfile,
    goodput_scale,
    scaled_profiles,
    speed_factors,
)
from app.replay.trace import TraceRequest

CHAT = SloProfile("chat", 1.0, 0.1, "attainment", 0.9, "")
SMOOTH = SloProfile("smooth", 1.0, 0.1, "fluidity", 0.99, "")


def test_profiles_scale_ttft_by_prefill_speed_and_tpot_by_decode_speed():
    factors = speed_factors(4 * REFERENCE_PREFILL_1K_S, 0.5 * REFERENCE_DECODE_STEP_S)
    assert (factors.prefill, factors.decode) == pytest.approx((4, 0.5))
    for base, scaled in zip(PROFILES, scaled_profiles(factors), strict=True):
        assert scaled.ttft_s == pytest.approx(4 * base.ttft_s)
        assert scaled.tpot_s == pytest.approx(0.5 * base.tpot_s)
        assert (scaled.measure, scaled.target) == (base.measure, base.target)
    with pytest.raises(ValueError):
        speed_factors(0, 1)


def test_chat_attainment_counts_both_bounds_and_refused_requests():
    on_time = ([0.5, 0.55, 0.6], 3)  # TTFT 0.5, TPOT 0.05
    slow_tokens = ([0.5, 0.9, 1.3], 3)  # TPOT 0.4
    refused: tuple[list[float], int] = ([], 3)
    measures = CHAT.measures([on_time, on_time, slow_tokens, refused])
    assert measures == {"attainment": 0.5}
    assert CHAT.margin(measures) == pytest.approx(-0.4)
    assert not CHAT.holds(measures)
    assert CHAT.holds(CHAT.measures([on_time] * 10))


def test_smooth_needs_the_fluidity_index_and_first_tokens_in_time():
    # 100 tokens each 0.08 s apart from 0.5 s (deadlines 0.1 s apart): every one met
    smooth = ([0.5 + 0.08 * i for i in range(100)], 100)
    # the same, starting 2 s late: one deadline of 100 missed, the rest met after it
    late = ([3.0 + 0.08 * i for i in range(100)], 100)
    all_late = SMOOTH.measures([late] * 10)
    assert all_late["fluidity"] == pytest.approx(0.99)  # the fluidity-index forgives it
    assert all_late["ttft_attainment"] == 0.0
    assert not SMOOTH.holds(all_late)  # the profile does not
    assert SMOOTH.holds(SMOOTH.measures([smooth] * 10))
    # one stall of 2 s in one stream of ten (past the 1 s of slack its early tokens
    # gave it): that stream misses one deadline, and only one
    stalled = ([0.5 + 0.08 * i + (2.0 if i >= 50 else 0) for i in range(100)], 100)
    found = SMOOTH.measures([smooth] * 9 + [stalled])
    assert found["fluidity"] == pytest.approx(1 - 1 / 1000)
    assert SMOOTH.holds(found)


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([(1, 0.05), (2, 0.02), (4, -0.02)], 3.0),  # interpolated between 2 and 4
        ([(4, -0.02), (1, 0.05), (2, 0.02)], 3.0),  # in any order
        ([(1, -0.1), (2, 0.1)], 0.0),  # the lowest fails: 0, whatever comes after
        ([(1, 0.1), (2, 0.0)], 2.0),  # none fails: the highest, a lower bound
        ([(1, 0.1), (2, -0.1), (4, 0.1)], 1.5),  # the first failure ends the climb
    ],
)
def test_goodput_is_read_off_the_ladder_as_distserve_reads_it(points, expected):
    assert goodput_scale(points) == pytest.approx(expected)


def test_the_ladder_climbs_geometrically_to_its_top():
    assert ladder(1.0, 2.0, 8.0) == [1.0, 2.0, 4.0, 8.0]


def _flat_profile(prefill_per_token_s: float, step_s: float) -> EngineProfile:
    return EngineProfile(
        prefill=[(1.0, prefill_per_token_s), (4096.0, 4096 * prefill_per_token_s)],
        decode=[(1.0, step_s), (64.0, step_s)],
    )


def test_the_advisor_names_the_layout_whose_engines_do_not_stall_streams():
    """Long prompts (4,000 tokens, 0.4 s each to prefill, in two 2,048-token chunks)
    among streams of 200 tokens whose decode steps (80 ms) leave little slack against
    a 0.1 s token deadline: on a colocated engine every prefill chunk stalls the streams
    beside it, and they miss deadlines; with the prefill on its own engine the decode
    engine never stalls. The smooth profile must go to a disaggregated layout, and chat
    (TTFT-bound) to two colocated engines, which prefill twice as fast as one prefill
    engine."""
    requests = [
        TraceRequest(at_s=0.5 * i, prompt_tokens=4000, output_tokens=200) for i in range(200)
    ]
    engine = _flat_profile(1e-4, 0.08)
    profiles = [
        SloProfile("chat", 1.0, 0.5, "attainment", 0.9, ""),
        SloProfile("smooth", 2.0, 0.1, "fluidity", 0.99, ""),
    ]

    def requests_at(rate: float) -> list[TraceRequest]:
        return [TraceRequest(r.at_s / rate, r.prompt_tokens, r.output_tokens) for r in requests]

    advice = advise_trace(
        requests_at, engine, profiles, layouts(512), lowest=0.25, step=1.25, highest=8
    )
    goodput = {name: row["goodput_scale"] for name, row in advice["layouts"].items()}
    assert advice["advised_winner"]["smooth"] in {"remote", "default"}, goodput
    assert goodput["colocated"]["smooth"] < goodput["remote"]["smooth"], goodput
    assert goodput["colocated_two"]["smooth"] < goodput["remote"]["smooth"], goodput
    assert advice["advised_winner"]["chat"] == "colocated_two", goodput
    assert any("context" in blind for blind in advice["blind_to"])  # a flat profile
    engine.decode_context_token_s = 1e-8
    sees_context = advise_trace(requests_at, engine, profiles[:1], layouts(512), 4, 2, 4)
    assert not any("context" in blind for blind in sees_context["blind_to"])
    assert any("crowded" in blind for blind in sees_context["blind_to"])
    engine.crowded_prefill = 1.2
    crowded = advise_trace(requests_at, engine, profiles[:1], layouts(512), 4, 2, 4)
    assert not any("crowded" in blind for blind in crowded["blind_to"])


def test_calibration_adds_the_serving_path_time_a_light_load_measured():
    """Each layout's overhead is its measured TTFT median less the simulated one: with
    it, the simulated median is the measured one; a layout not measured is unchanged."""
    engine = _flat_profile(1e-4, 0.005)
    requests = [TraceRequest(at_s=2.0 * i, prompt_tokens=1000, output_tokens=10) for i in range(21)]
    two = layouts(512)
    colocated, remote = two[0], two[2]
    found = {a.name: a for a in calibrated(two, {"remote": 0.3}, requests, engine)}
    assert found["colocated"] == colocated
    # alone on its engines, each prompt's first token comes 0.1 s (its prefill) after it
    # arrives: the prefill engine samples it (``first_token_on_prefill``, as splitserve)
    assert found["remote"].overhead_s == pytest.approx(0.3 - 0.1, abs=0.002)
    firsts = sorted(t[0] for t, _ in simulated_streams(requests, engine, found["remote"]))
    assert firsts[len(firsts) // 2] == pytest.approx(0.3, abs=0.002)
    assert remote.overhead_s == 0.0


def test_a_pass_whose_window_holds_no_request_is_no_evidence():
    """A quiet stretch of a trace (the coding trace sends nothing for 2 s from 600 s):
    the lowest rates' passes are empty, and the advisor climbs past them instead of
    reading the profile as failed at the first rate."""
    engine = _flat_profile(1e-4, 0.005)
    requests = [TraceRequest(at_s=2.0 * i, prompt_tokens=100, output_tokens=4) for i in range(20)]

    def requests_at(rate: float) -> list[TraceRequest]:
        return [] if rate < 1 else requests

    profiles = scaled_profiles(speed_factors(0.05, 0.007))
    advice = advise_trace(requests_at, engine, profiles, layouts(512)[:1], 0.5, 2.0, 4.0)
    assert advice["layouts"]["colocated"]["goodput_scale"]["chat"] == 4.0
    rates = [c["rate_scale"] for c in advice["layouts"]["colocated"]["curves"]["chat"]]
    assert rates == [1.0, 2.0, 4.0]
