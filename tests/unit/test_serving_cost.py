"""The serving-cost benchmark's arithmetic: CPU per 1,000 tokens split into serving and
engine, the stream's shape as a client sees it, and py-spy's collapsed stacks read."""

from __future__ import annotations

from typing import Any

from load_tests.client.stats import StreamTiming
from load_tests.serving.serving_cost import per_kilo_token, stream_shape, top_functions


def test_cpu_per_thousand_tokens_splits_serving_from_the_engine():
    seconds = {"engine core": 2.0, "Ingress replica": 0.5, "raylet": 0.1, "engine worker": 1.0}
    row = per_kilo_token(seconds, 4000)
    assert row["Ingress replica"] == 125.0
    assert row["serving"] == 150.0  # (0.5 + 0.1) s over 4 k tokens
    assert row["engine"] == 750.0
    assert per_kilo_token(seconds, 0) == {}


def test_stream_shape_counts_events_gaps_and_stalls():
    timings = [
        StreamTiming(ttft=0.01, end=0.3, output_tokens=6, chunk_gaps=(0.05, 0.15)),
        StreamTiming(ttft=0.02, end=0.1, output_tokens=2, chunk_gaps=(0.01,)),
        StreamTiming(ttft=0.02, end=0.02, output_tokens=0),  # no text at all: no event
    ]
    shape = stream_shape(timings)
    assert shape["stalls_over_100ms"] == 1
    assert shape["token_gap_max_ms"] == 150.0
    assert shape["tokens_per_event"] == 8 / 5


def test_top_functions_reads_own_and_total_samples():
    raw = "\n".join(
        [
            "main (a.py:1);serve (a.py:5);encode (b.py:9) 6",
            "main (a.py:1);serve (a.py:5) 2",
            "main (a.py:1);poll (c.py:3) 2",
            "not a stack line",
        ]
    )
    found = top_functions(raw)
    assert found["samples"] == 10
    own = {f["function"]: f["share"] for f in found["own"]}
    total = {f["function"]: f["share"] for f in found["total"]}
    assert own == {"encode (b.py:9)": 0.6, "serve (a.py:5)": 0.2, "poll (c.py:3)": 0.2}
    assert total["main (a.py:1)"] == 1.0
    assert total["serve (a.py:5)"] == 0.8


def test_rounds_spread_gives_each_figures_median_and_range_per_level():
    from load_tests.serving.serving_cost import round_name, spread

    def row(idle: float, tok_s: float, gap_p99: float | None) -> dict[str, Any]:
        return {
            "idle_cpu_total_pct": idle,
            "levels": [
                {
                    "concurrency": 16,
                    "output_tok_per_s": tok_s,
                    "ttft_ms": {"p50": 10.0},
                    "token_gap_ms": {"p99": gap_p99},
                    "stalls_over_100ms": 0,
                    "tokens_per_event": 1.5,
                    "cpu_ms_per_1k_tokens": {},  # no CPU read: left out, not zero
                }
            ],
        }

    found = spread([row(5.0, 2000.0, 40.0), row(7.0, 2600.0, None), row(6.0, 2100.0, 60.0)])
    assert found["idle_cpu_total_pct"] == {"median": 6.0, "min": 5.0, "max": 7.0}
    level = found["c=16"]
    assert level["output_tok_per_s"] == {"median": 2100.0, "min": 2000.0, "max": 2600.0}
    assert level["token_gap_p99_ms"] == {"median": 50.0, "min": 40.0, "max": 60.0}
    assert "serving_cpu_ms_per_1k_tokens" not in level
    assert round_name("vLLM OpenAI server", 1) == "vLLM OpenAI server"
    assert round_name("vLLM OpenAI server", 3) == "vLLM OpenAI server, round 3"
