import math

import pytest

from app.planning.goodput import (
    SLO,
    attainment,
    find_goodput,
    find_goodput_repeated,
    median_goodput,
    misses,
    requests_at,
)
from load_tests.client.stats import StreamTiming

SLO_ = SLO(ttft_s=0.2, tpot_s=0.05)


def _t(ttft, tpot, tokens=11):
    return StreamTiming(ttft=ttft, end=ttft + tpot * (tokens - 1), output_tokens=tokens)


def test_a_request_must_meet_both_bounds():
    assert SLO_.met_by(_t(0.1, 0.04))
    assert not SLO_.met_by(_t(0.3, 0.04))
    assert not SLO_.met_by(_t(0.1, 0.06))
    assert SLO_.met_by(_t(0.1, 0.0, tokens=1))  # one token: no TPOT to miss


def test_attainment_counts_failures_as_misses():
    timings = [_t(0.1, 0.01)] * 8 + [_t(0.5, 0.01)] * 2
    assert attainment(timings, SLO_) == pytest.approx(0.8)
    assert attainment(timings, SLO_, failed=10) == pytest.approx(0.4)
    assert attainment([], SLO_) == 0.0


def test_misses_say_which_target_each_request_missed():
    timings = [_t(0.1, 0.01)] * 6 + [_t(0.3, 0.01)] * 2 + [_t(0.3, 0.06)] + [_t(0.1, 0.0, tokens=1)]
    found = misses(timings, SLO_)
    assert found["requests"] == 10
    assert found["over_ttft"] == pytest.approx(0.3)  # the one over both counts in each
    assert found["over_tpot"] == pytest.approx(0.1)  # a one-token answer has no TPOT
    assert found["ttft_p50_ms"] == pytest.approx(100.0)
    assert found["ttft_p90_ms"] == pytest.approx(300.0)
    assert found["tpot_p90_ms"] == pytest.approx(60.0)
    assert misses([], SLO_)["over_ttft"] == 0.0
    assert math.isnan(misses([], SLO_)["ttft_p90_ms"])


def _capacity_model(capacity):
    """Attainment of a server that meets the SLO for everything below ``capacity`` req/s."""
    return lambda rate: 1.0 if rate <= capacity else capacity / rate * 0.8


@pytest.mark.parametrize("capacity", [0.7, 3.0, 5.5, 12.0])
def test_goodput_bisection_finds_the_knee(capacity):
    search = find_goodput(_capacity_model(capacity), start_rate=1.0, bisections=8)
    assert capacity * 0.97 <= search.goodput <= capacity
    rates = [r for r, _ in search.tried]
    assert rates[0] == 1.0 and len(rates) <= 5 + 8  # the sweep, then 8 bisections


def test_goodput_is_zero_when_even_the_first_rate_fails():
    search = find_goodput(lambda rate: 0.5, start_rate=1.0, bisections=3)
    assert search.goodput == 0.0
    assert [r for r, _ in search.tried] == [1.0, 0.5, 0.25, 0.125]


def test_goodput_stops_at_max_rate():
    search = find_goodput(lambda rate: 1.0, start_rate=1.0, max_rate=16)
    assert search.goodput == 16


def test_bad_search_parameters_are_refused():
    with pytest.raises(ValueError):
        find_goodput(lambda rate: 1.0, start_rate=0)
    assert math.isnan(StreamTiming(0.1, 0.1, 1).tpot)


def test_each_rate_lasts_the_given_seconds_with_a_floor():
    assert requests_at(10.0, 20.0, 40) == 200
    assert requests_at(0.5, 20.0, 40) == 40
    assert requests_at(2.5, 3.0, 1) == 8  # rounded up


def test_repeated_searches_each_measure_with_their_own_repeat_and_report_the_median():
    """A machine that drifts: each repeat's capacity differs; the run gives the median."""
    capacities = [3.0, 8.0, 6.0]
    calls: list[tuple[float, int]] = []

    def measure(rate: float, repeat: int) -> float:
        calls.append((rate, repeat))
        return float(_capacity_model(capacities[repeat])(rate))

    searches = find_goodput_repeated(measure, 3, start_rate=1.0, bisections=8)
    found = [search.goodput for search in searches]
    assert [c * 0.97 <= g <= c for c, g in zip(capacities, found, strict=True)] == [True] * 3
    assert median_goodput(searches) == sorted(found)[1]
    # The repeats ran one after another, each told which it is.
    repeats = [repeat for _, repeat in calls]
    assert repeats == sorted(repeats) and set(repeats) == {0, 1, 2}


def test_a_repeat_count_under_one_is_refused():
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        find_goodput_repeated(lambda rate, repeat: 1.0, 0, start_rate=1.0)


def test_the_report_shows_the_median_goodput_with_its_spread():
    from load_tests.reports.compare_report import tables

    stream = {"ttft_ms": {"p50": 10.0, "p99": 20.0}, "tpot_ms": {"p50": 2.0}}
    mixed = {
        "short_ttft_ms": {"p50": 20.0, "p99": 90.0},
        "short_itl_ms": {"p50": 3.0, "p99": 9.0},
        "short_tpot_ms": {"p50": 3.0},
        "long_ttft_ms": {"p50": 140.0},
        "failed": 0,
    }
    row = {
        "startup_s": 30.0,
        "idle_cpu_total_pct": 10.0,
        "rss_total_mib": 1.0,
        "pss_total_mib": 1.0,
        "c1": stream,
        "c16": {**stream, "output_tok_per_s": 2000.0},
        "mixed": mixed,
    }
    text = tables(
        {
            "rows": {
                "one search": {**row, "goodput_req_per_s": 9.0},
                "three searches": {
                    **row,
                    "goodput_req_per_s": 6.0,
                    "goodput_runs_req_per_s": [3.5, 8.0, 6.0],
                },
            }
        }
    )
    assert "| 0 | 9 |" in text
    assert "| 0 | 6 (3.5 to 8) |" in text
