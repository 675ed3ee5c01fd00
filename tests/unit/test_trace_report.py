"""The trace benchmark's conclusions: goodput over repeats, the measured winner and its
ties beside the advised layout, and failures below goodput."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.replay.profiles import SloProfile
from load_tests.reports.trace_report import failed_below_goodput, goodput_by_profile, verdicts

CHAT = SloProfile("chat", 1.0, 0.1, "attainment", 0.9, "")


def passes(
    margins_by_repeat: list[list[tuple[float, float]]], failed: int = 0
) -> list[dict[str, Any]]:
    return [
        {
            "rate_scale": rate,
            "repeat": repeat,
            "failed": failed,
            "profiles": {"chat": {"margin": m}},
        }
        for repeat, ladder in enumerate(margins_by_repeat)
        for rate, m in ladder
    ]


def test_goodput_is_the_median_of_the_climbs_with_their_spread():
    climbs = [[(1.0, 0.1), (2.0, -0.1)], [(1.0, 0.1), (2.0, 0.1), (4.0, -0.1)], [(1.0, -0.1)]]
    found = goodput_by_profile(passes(climbs), [CHAT], repeats=3)["chat"]
    assert found == {"median": 1.5, "min": 0.0, "max": 3.0, "repeats": [1.5, 3.0, 0.0]}


def row(median: float, low: float, high: float) -> dict[str, Any]:
    return {"goodput_scale": {"chat": {"median": median, "min": low, "max": high}}}


LAYOUT = {"vllm": "colocated", "colocated": "colocated", "remote": "remote"}


def advice(winner: str) -> dict[str, Any]:
    return {"advised_winner": {"chat": winner}, "layouts": {}}


def test_the_advised_layout_agrees_with_a_winner_or_a_system_tied_with_it():
    rows = {
        "vllm": row(2.0, 1.9, 2.1),
        "colocated": row(1.8, 1.7, 1.85),
        "remote": row(1.95, 1.8, 2.0),
    }
    found = verdicts(rows, LAYOUT, advice("remote"), advice("colocated"), [CHAT])["chat"]
    assert found["measured_winner"] == "vllm" and found["measured_winner_layout"] == "colocated"
    assert found["tied"] == ["vllm", "remote"]  # remote's spread reaches the winner's
    assert found["agrees"] and not found["agrees_strictly"]
    assert found["agrees_calibrated"]  # colocated is vLLM's layout


def test_a_system_beaten_beyond_the_noise_is_not_a_tie():
    rows = {
        "vllm": row(2.0, 1.9, 2.1),
        "colocated": row(1.8, 1.7, 1.85),
        "remote": row(1.0, 0.9, 1.1),
    }
    found = verdicts(rows, LAYOUT, advice("remote"), advice("remote"), [CHAT])["chat"]
    assert found["tied"] == ["vllm"]
    assert not found["agrees"] and not found["agrees_calibrated"]


def test_failures_count_only_below_a_systems_lowest_goodput():
    rows = {"vllm": {**row(2.0, 1.5, 2.1), "passes": passes([[(1.0, 0.1), (2.0, 0.1)]], failed=3)}}
    assert failed_below_goodput(rows) == {"vllm": 3}  # rate 1 is below 1.5; rate 2 is not


def test_the_admission_budget_refuses_no_wait_the_loosest_profile_meets():
    """Both of admission's wait rules fire only past the loosest profile's TTFT (the
    predicted-wait rule at 0.35 of a budget of twice the TTFT fired at 0.7 of it)."""
    from app.api.admission import Admission
    from app.config import AdmissionConfig
    from load_tests.systems.trace_systems import admission_budget

    rules = AdmissionConfig()
    for loosest in (0.3, 5.975, 12.0):
        gate = Admission(
            admission_budget(loosest),
            rules.max_waiting,
            headroom=rules.headroom,
            predicted_share=rules.predicted_share,
        )
        assert gate.limit_s >= loosest
        assert gate.predicted_limit_s >= loosest
        assert gate.predicted_limit_s < loosest * 1.01


def test_the_transport_gives_up_nothing_the_loosest_profile_waits_for():
    """On a slow host (loosest TTFT 133 s) no prefill or transfer is given up before it;
    on a fast one the shipped timeouts stand. The lease admits a read as late as the
    transfer may wait, and the app's config takes the values."""
    from app.config import AppConfig
    from app.config.transport import TransportConfig
    from load_tests.systems.trace_systems import transport_timeouts

    shipped = TransportConfig()
    fast = transport_timeouts(5.7)
    assert fast["prefill_timeout_s"] == shipped.prefill_timeout_s
    assert fast["transfer_timeout_s"] == shipped.transfer_timeout_s
    assert fast["kv_lease_s"] >= shipped.kv_lease_s
    slow = transport_timeouts(133.0)
    assert slow["prefill_timeout_s"] == slow["prefill_queue_timeout_s"] == 133.0
    assert slow["transfer_timeout_s"] == 133.0
    lease = int(slow["kv_lease_s"])
    assert lease - (lease // 6 + 2) >= slow["transfer_timeout_s"]
    AppConfig.model_validate({"transport": slow})


def test_a_short_trace_starts_at_zero_and_cuts_the_rates_it_cannot_fill():
    from load_tests.serving.trace_bench import start_and_fill, within

    # The shipped trace (58 minutes): 600 s in, passes of 15 s fill rate scales to ~193.
    assert start_and_fill(3480.0, None, 15.0) == (600.0, 192.0)
    # A 10-minute trace starts at 0; a pass of 15 s fills rate scales up to 40.
    assert start_and_fill(600.0, None, 15.0) == (0.0, 40.0)
    # A start past the end fills nothing: the lowest rate is still measured (and says so).
    assert start_and_fill(100.0, 600.0, 15.0) == (600.0, 0.0)
    assert within([0.5, 1.0, 2.0, 4.0], 2.5) == [0.5, 1.0, 2.0]
    assert within([0.5, 1.0], 0.0) == [0.5]


def test_the_advisor_charges_the_front_end_fit_of_this_cpu_model(tmp_path: Path):
    from load_tests.systems.trace_systems import FALLBACK_FIT, frontend_fit_for

    def fit(name: str, cpu: str, replicas: bool = True) -> Path:
        body: dict[str, Any] = {"conditions": {"machine": {"cpu": cpu}}, "request_s": 0.01}
        if replicas:
            body["replica_chunk_s"] = 0.0003
        path = tmp_path / name
        path.write_text(json.dumps(body))
        return path

    fit("frontend_fit_2026-12-03.json", "Xeon (with AVX-512)")
    fit("frontend_fit_2026-12-05_epyc.json", "EPYC (without AVX-512)")
    newest = fit("frontend_fit_2026-12-07_epyc.json", "EPYC (without AVX-512)")
    fit("frontend_fit_2026-12-09_epyc.json", "EPYC (without AVX-512)", replicas=False)
    assert frontend_fit_for("EPYC (without AVX-512)", tmp_path) == (newest, True)
    # no fit of this model: the fallback, said so
    assert frontend_fit_for("EPYC (with AVX-512)", tmp_path) == (FALLBACK_FIT, False)
    # the shipped fits: this machine kind's, and the fallback exists
    assert FALLBACK_FIT.exists()
    shipped, matched = frontend_fit_for("AMD EPYC (without AVX-512)")
    assert matched and shipped.name == "frontend_fit_2026-12-07_epyc.json"
