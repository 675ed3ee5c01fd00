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


def test_a_finished_runs_advice_is_worked_out_again_beside_its_own(tmp_path: Path):
    from app.planning.engine_profile import EngineProfile
    from load_tests.reports.trace_readvise import engine_profile, readvise

    trace = tmp_path / "trace.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{s:02d}.0000000,{200 + 50 * s},8\n" for s in range(20))
    )
    stated = {
        "prefill": [[16.0, 0.001], [1024.0, 0.03]],
        "decode": [[1.0, 0.003], [16.0, 0.006]],
        "decode_context": 128,
        "decode_context_token_s": 0.0,
        "crowded_decode": 1.37,
    }
    goodput = {"median": 1.0, "min": 1.0, "max": 1.0, "repeats": [1.0]}
    systems = ("vllm", "colocated_two", "colocated", "remote", "default")
    result: dict[str, Any] = {
        "conditions": {
            "machine": {"cpus": 2},
            "trace": str(trace),
            "window_at_rate_1": {
                "start_s": 0.0,
                "duration_s": 10.0,
                "rate_scale": 1.0,
                "length_scale": 1.0,
                "output_scale": 1.0,
                "max_prompt_tokens": 15360,
            },
            "pass_s": 10.0,
            "highest_rate_the_trace_fills": 1.9,
            "profiles": [CHAT.stated()],
            "engine_profile": stated,
        },
        "advice": {"advised_winner": {"chat": "was"}},
        "advice_calibrated": {"advised_winner": {"chat": "colocated"}},
        "profiles": {"chat": "as run"},
        "systems": {
            name: {
                "layout": "colocated" if name == "vllm" else name,
                "goodput_scale": {"chat": goodput},
            }
            for name in systems
        },
    }
    path = tmp_path / "run.json"
    # no .engine.json beside the result: the curves and crowded factors of its conditions
    profile = engine_profile(path, result, None)
    assert profile.crowded_decode == 1.37 and profile.prefill[-1] == (1024.0, 0.03)
    again = readvise(result, profile, trace, frontend=None)
    assert again["advice_as_run"] == {"advised_winner": {"chat": "was"}}
    assert again["profiles_as_run"] == {"chat": "as run"}
    assert set(again["advice"]["layouts"]) == {"colocated", "colocated_two", "remote", "default"}
    verdict = again["profiles"]["chat"]
    assert verdict["advised_winner"] == again["advice"]["advised_winner"]["chat"]
    assert set(verdict["tied"]) == set(systems)  # every system measured alike
    # a profile file beside the result wins over the conditions' curves
    EngineProfile(prefill=[(16.0, 0.002), (1024.0, 0.05)], decode=[(1.0, 0.004)]).save(
        path.with_suffix(".engine.json")
    )
    assert engine_profile(path, result, None).prefill[-1] == (1024.0, 0.05)
