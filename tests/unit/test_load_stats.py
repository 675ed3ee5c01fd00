import math

import pytest

from load_tests.client.stats import StreamTiming, percentile, summarize


def test_percentile_matches_linear_interpolation():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == pytest.approx(3.85)
    assert math.isnan(percentile([], 50))


def test_percentile_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_summary_has_the_tail():
    s = summarize([float(i) for i in range(1, 101)])
    assert s["n"] == 100 and s["p50"] == pytest.approx(50.5) and s["p99"] == pytest.approx(99.01)


def test_tpot_counts_tokens_not_chunks():
    timing = StreamTiming(ttft=0.1, end=1.1, output_tokens=11)
    assert timing.tpot == pytest.approx(0.1)
    assert math.isnan(StreamTiming(ttft=0.1, end=0.1, output_tokens=1).tpot)
