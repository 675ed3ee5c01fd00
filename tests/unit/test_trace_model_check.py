"""The advisor's model beside a finished run's passes: the simulator's figures for the
same requests, checked against hand-computed ones, and the ratios to what was measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.planning.engine_profile import EngineProfile
from app.replay.profiles import SloProfile
from load_tests.reports.trace_model_check import compare, geomean, ratio
from load_tests.reports.trace_readvise import layouts_as_run, passes_of

CHAT = SloProfile("chat", 0.01, 0.1, "attainment", 0.9, "")
# prefill: 1 ms at 16 tokens, 30 ms at 1,024; a one-sequence decode step: 3 ms
PROFILE = EngineProfile(prefill=[(16.0, 0.001), (1024.0, 0.03)], decode=[(1.0, 0.003)])


def measured_pass(rate: float, ttft_p50_ms: float, tpot_p50_ms: float) -> dict[str, Any]:
    return {
        "rate_scale": rate,
        "repeat": 0,
        "sent": 10,
        "failed": 0,
        "statuses": {},
        "ttft_ms": {"p50": ttft_p50_ms, "p95": ttft_p50_ms, "p99": ttft_p50_ms},
        "tpot_ms": {"p50": tpot_p50_ms, "p95": tpot_p50_ms, "p99": tpot_p50_ms},
        "profiles": {"chat": {"attainment": 0.0, "margin": -0.9}},
    }


def test_each_pass_is_set_beside_the_models_run_of_the_same_requests(tmp_path: Path):
    trace = tmp_path / "trace.csv"
    # one 200-token prompt of 8 output tokens a second: no request waits for another
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{s:02d}.0000000,200,8\n" for s in range(30))
    )
    result: dict[str, Any] = {
        "conditions": {
            "machine": {"cpus": 2},
            "window_at_rate_1": {
                "start_s": 0.0,
                "duration_s": 10.0,
                "rate_scale": 1.0,
                "length_scale": 1.0,
                "output_scale": 1.0,
                "max_prompt_tokens": 15360,
            },
            "profiles": [CHAT.stated()],
        },
        "systems": {
            "vllm": {
                "layout": "colocated",
                "passes": [
                    measured_pass(1.0, ttft_p50_ms=12.6, tpot_p50_ms=3.0),
                    measured_pass(2.0, ttft_p50_ms=6.3, tpot_p50_ms=6.0),
                    {**measured_pass(1.0, 99.0, 99.0), "repeat": 1},  # a repeat: left out
                ],
            }
        },
    }
    check = compare(result, PROFILE, layouts_as_run(result, None), passes_of(result, trace), [CHAT])
    row = check["vllm"]
    assert [p["rate_scale"] for p in row["passes"]] == [1.0, 2.0]
    first = row["passes"][0]["predicted"]
    # the request prefills alone in one step (1 + 29 x 184 / 1,008 ms), then decodes 7
    # tokens at 3 ms a step
    assert first["sent"] == 10
    assert first["ttft_ms"]["p50"] == 6.3
    assert first["tpot_ms"]["p50"] == 3.0
    # a first token in 6.3 ms misses the 10 ms bound nowhere: every request holds
    assert first["profiles"]["chat"] == {"attainment": 1.0, "margin": 0.1}
    assert row["passes"][1]["predicted"]["sent"] == 20  # twice the trace's seconds at x2
    assert [p["ttft_p50_ratio"] for p in row["passes"]] == [0.5, 1.0]
    assert [p["tpot_p50_ratio"] for p in row["passes"]] == [1.0, 0.5]
    assert row["ttft_p50_ratio_geomean"] == pytest.approx(0.707, abs=1e-3)
    # A run that stated a minimum lengthened its thin passes: the model is given the
    # same requests (x0.5: 5 s of trace hold 5, so the pass ran twice as long: 10).
    passes = passes_of(
        {**result, "conditions": {**result["conditions"], "min_pass_requests": 10}}, trace
    )
    assert [len(passes(rate)) for rate in (0.5, 1.0, 2.0)] == [10, 10, 20]
    assert len(passes_of(result, trace)(0.5)) == 5


def test_ratios_skip_what_was_not_measured():
    assert ratio(None, 5.0) is None and ratio(5.0, None) is None and ratio(5.0, 0.0) is None
    assert ratio(3.0, 6.0) == 0.5
    assert geomean([None, 2.0, 8.0]) == 4.0
    assert geomean([None]) is None
