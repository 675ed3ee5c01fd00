"""The trace replay's pure parts: reading and windowing a trace, attainment, and the
fluidity-index against hand-worked streams."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from app.replay.client import Answer
from app.replay.report import summary
from app.replay.slo import Slo, attainment, deadlines_met, fluidity_index
from app.replay.trace import BUILTIN, Window, judged_window, read_trace, windowed

SLO = Slo(ttft_s=0.25, tpot_s=0.05)


def test_the_shipped_azure_trace_reads_in_order_from_zero():
    rows = read_trace(BUILTIN)
    assert len(rows) == 19366
    assert rows[0][0] == 0.0 and all(a[0] <= b[0] for a, b in pairwise(rows))
    assert rows[0][1:] == (374, 44)
    assert 3400 < rows[-1][0] < 3600  # 58 minutes


def test_a_window_is_cut_sped_up_and_scaled(tmp_path: Path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.0000000,100,10\n"
        "2023-11-16 18:00:10.0000000,1000,50\n"
        "2023-11-16 18:00:20.5000000,3000,3\n"
        "2023-11-16 18:00:40.0000000,7,7\n"
    )
    window = Window(
        start_s=10,
        duration_s=20,
        rate_scale=5,
        length_scale=0.5,
        output_scale=0.1,
        max_prompt_tokens=1024,
    )
    got = windowed(read_trace(trace), window)
    assert [(r.at_s, r.prompt_tokens, r.output_tokens) for r in got] == [
        (0.0, 500, 5),
        (2.1, 1024, 1),  # 10.5 s after the start / 5; capped prompt; at least one token
    ]
    assert window.stated()["rate_scale"] == 5


def test_a_pass_too_few_arrive_in_lasts_longer_at_the_same_rate_or_is_not_run():
    # one request every 4 s of the trace for 100 s, then none
    rows = [(float(at), 100, 10) for at in range(0, 100, 4)]
    at_one = Window(start_s=0, duration_s=10)
    # x1: 10 s of trace holds 3 requests; 20 s holds 5; 40 s holds 10: lasts 4x as long
    found = judged_window(rows, at_one, 1.0, least=10)
    assert found is not None and found.duration_s == 40 and found.rate_scale == 1.0
    assert len(windowed(rows, found)) == 10
    # x2: 20 s of trace in a pass of 10 s holds 5; twice as long holds 10, still at x2
    found = judged_window(rows, at_one, 2.0, least=10)
    assert found is not None and found.duration_s == 40 and found.rate_scale == 2.0
    assert windowed(rows, found)[-1].at_s == 36 / 2
    # x4: the pass as it is holds 10 already
    assert judged_window(rows, at_one, 4.0, least=10) == at_one.at_rate(4.0)
    # x0.5: 5 s holds 2, 10 s 3, 20 s 5: fewer than 10 in 4x the pass, not run
    assert judged_window(rows, at_one, 0.5, least=10) is None
    # no minimum (runs made before it): the pass as the window says, even empty
    assert judged_window([], at_one, 0.5, least=0, longest=1) == at_one.at_rate(0.5)


def test_the_2024_traces_stamps_with_a_zone_read_beside_whole_seconds(tmp_path: Path):
    """Azure's 2024 traces write six fractional digits and a zone; a whole second may
    carry no fraction, and a row in another zone is the same instant in UTC."""
    trace = tmp_path / "t2024.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,4808,10\n"
        "2024-05-10 00:00:01+00:00,3180,8\n"
        "2024-05-10 02:00:02.5+02:00,110,27\n"
        "2024-05-10T00:00:03.25Z,7,1\n"
    )
    rows = read_trace(trace)
    assert [round(at, 6) for at, _, _ in rows] == [0.0, 0.99007, 2.49007, 3.24007]
    assert [p for _, p, _ in rows] == [4808, 3180, 110, 7]


def test_a_file_that_is_not_a_trace_is_refused_naming_what_it_lacks(tmp_path: Path):
    bad = tmp_path / "bad.csv"
    bad.write_text("time,prompt\n1,2\n")
    with pytest.raises(ValueError, match="lacks"):
        read_trace(bad)
    worse = tmp_path / "worse.csv"
    worse.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n")
    with pytest.raises(ValueError, match=":2:"):
        read_trace(worse)


def test_attainment_needs_both_bounds_and_counts_refusals_as_missed():
    outcomes = [(0.1, 0.02), (0.3, 0.02), (0.1, 0.06), (0.2, None), (None, None)]
    assert attainment(outcomes, SLO) == 2 / 5


def test_the_fluidity_index_counts_one_stall_once():
    smooth = [0.1 + 0.04 * i for i in range(10)]  # every deadline met
    assert deadlines_met(smooth, SLO) == 10
    # A 1 s stall before token 5: that token misses; later deadlines run from it.
    stalled = [0.1 + 0.04 * i for i in range(5)] + [1.3 + 0.04 * i for i in range(5)]
    assert deadlines_met(stalled, SLO) == 9
    late_first = [0.5 + 0.04 * i for i in range(4)]
    assert deadlines_met(late_first, SLO) == 3  # all but the late first token
    # A stream cut short misses its remaining deadlines; a refused one all of them.
    assert fluidity_index([(smooth, 10), (smooth[:5], 10), ([], 5)], SLO) == 15 / 25


def test_the_report_states_the_window_and_counts_outcomes():
    window = Window(duration_s=10, rate_scale=2)
    answers = [
        Answer(0.0, 10, 3, status=200, token_times_s=[0.1, 0.12, 0.15], path="nixl"),
        Answer(0.5, 10, 3, status=503, error="overloaded"),
    ]
    report = summary(answers, window, SLO)
    assert report["window"]["rate_scale"] == 2 and report["requests"] == 2
    assert report["statuses"] == {"200": 1, "503": 1}
    assert report["slo_attainment"] == 0.5 and report["goodput_rps"] == 0.2
    assert report["paths"] == {"nixl": 1}
    assert report["fluidity_index"] == 0.5


def test_refusals_count_together_by_reason_whatever_their_figures():
    def refused(message: str) -> Answer:
        body = json.dumps({"error": {"message": message, "type": "server_error"}})
        return Answer(0.0, 10, 3, status=503, error=body)

    answers = [
        refused("server overloaded: 12 requests wait 2.6 s for a first token"),
        refused("server overloaded: 40 requests wait 3.1 s for a first token"),
        refused("server overloaded: 128 requests already wait for their first token"),
        Answer(0.0, 10, 3, status=503, error="not json"),
    ]
    assert summary(answers, Window(duration_s=10), SLO)["refusals"] == {
        "server overloaded: # requests wait # s for a first token": 2,
        "server overloaded: # requests already wait for their first token": 1,
        "not json": 1,
    }


def test_event_lines_split_where_the_sse_spec_splits_them_and_nowhere_else():
    """U+2028 and U+0085 inside an event's JSON (a model's raw text) stay in their line;
    CR LF split across chunks is one line end."""
    import asyncio

    from app.replay.client import sse_lines

    event = json.dumps({"text": "a\u2028b\u0085c"}, ensure_ascii=False).encode()
    stream = b"data: " + event + b"\r\n\r\ndata: [DONE]\r\n\r\n"
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]  # cuts mid-character

    async def lines(chunks: list[bytes]) -> list[str]:
        async def source():
            for chunk in chunks:
                yield chunk

        return [line async for line in sse_lines(source())]

    split = asyncio.run(lines(pieces))
    assert split == ["data: " + event.decode(), "", "data: [DONE]", ""]
    assert json.loads(split[0][len("data: ") :])["text"] == "a\u2028b\u0085c"
    assert asyncio.run(lines([b"data: 1\rdata: 2\ndata: 3"])) == ["data: 1", "data: 2", "data: 3"]
