"""An engine replica's figures for the SLO policy (app.scaling.autoscaling_stats)."""

from __future__ import annotations

import pytest

from app.observability.engine_tally import ITL_BOUNDS, TTFT_BOUNDS, EngineTally
from app.scaling.autoscaling_stats import Snapshot, WindowStats, histogram_percentile


def test_histogram_percentile_interpolates_inside_the_bucket():
    buckets = ((0.1, 0.0), (0.2, 10.0), (0.4, 20.0), (float("inf"), 20.0))
    assert histogram_percentile(buckets, 0.25) == pytest.approx(0.15)
    assert histogram_percentile(buckets, 0.9) == pytest.approx(0.2 + 0.2 * 0.8)
    assert histogram_percentile(((0.1, 0.0), (float("inf"), 0.0)), 0.9) is None
    # beyond the last finite bound: that bound
    assert histogram_percentile(((0.1, 1.0), (float("inf"), 10.0)), 0.9) == 0.1


def _step(ttft: list[float], itl: list[float], prompt: int, running: int):
    """One engine step's stats, as vLLM 0.32's output loop hands them to a stat logger."""
    from vllm.v1.metrics.stats import IterationStats, PrefixCacheStats, SchedulerStats

    scheduler = SchedulerStats(
        num_running_reqs=running,
        num_waiting_reqs=2,
        num_skipped_waiting_reqs=5,  # waiting for their KV: not a full batch
        kv_cache_usage=0.25,
        prefix_cache_stats=PrefixCacheStats(requests=1, queries=prompt, hits=64),
        # MultiConnector's shape: per connector; NIXL's lists, one entry per transfer
        kv_connector_stats={
            "TimedNixlConnector": {
                "transfer_duration": [0.002, 0.003],
                "bytes_transferred": [4096, 8192],
                "num_failed_transfers": [1],
            }
        },
    )
    iteration = IterationStats()
    iteration.prompt_token_stats.total = prompt
    iteration.prompt_token_stats.cached_tokens = 64
    iteration.time_to_first_tokens_iter = ttft
    iteration.inter_token_latencies_iter = itl
    return scheduler, iteration


def test_tally_reads_each_step_as_the_registry_did():
    tally = EngineTally()
    tally.record(*_step([0.05, 0.3], [0.02] * 4, 700, 3))
    tally.record(None, None)  # a step without stats changes nothing
    snap = tally.snapshot(busy_s=1.5, at_s=10.0, arrived_prompt_tokens=800)
    assert snap.prompt_tokens == 700 and snap.cached_prompt_tokens == 64
    assert snap.ttft[-1] == (float("inf"), 2.0)
    assert dict(snap.ttft)[0.06] == 1.0 and dict(snap.ttft)[0.5] == 2.0
    assert dict(snap.itl)[0.025] == 4.0 and dict(snap.itl)[0.01] == 0.0
    assert snap.gauges == {"running": 3.0, "waiting": 2.0, "kv_usage": 0.25}
    assert (snap.busy_s, snap.at_s, snap.arrived_prompt_tokens) == (1.5, 10.0, 800)
    tally.record(*_step([], [0.5], 100, 1))
    counters = tally.counters()
    assert counters["vllm:prefix_cache_queries_total"] == 800
    assert counters["vllm:prefix_cache_hits_total"] == 128
    assert counters["vllm:nixl_bytes_transferred_sum"] == 2 * 12288
    assert counters["vllm:nixl_xfer_time_seconds_count"] == 4
    assert counters["vllm:nixl_num_failed_transfers_total"] == 2
    assert counters["vllm:num_requests_running"] == 1
    assert counters["vllm:num_requests_waiting"] == 7  # both kinds, as vLLM's gauge
    assert tally.itl.count == 5 and tally.itl.sum == pytest.approx(0.58)


def test_tally_buckets_are_vllms_own():
    """Percentiles read from the tally must match what vLLM's histograms would give."""
    from vllm.v1.metrics.buckets import histogram_buckets

    assert tuple(histogram_buckets("time_to_first_token")) == TTFT_BOUNDS
    assert tuple(histogram_buckets("inter_token_latency")) == ITL_BOUNDS


def test_window_figures_count_only_the_window():
    stats = WindowStats(window_s=10, percentile=90)
    empty = ((0.1, 0.0), (0.5, 0.0), (float("inf"), 0.0))
    stats.add(Snapshot(at_s=0, busy_s=0, ttft=empty))
    # 5 s later: 10 requests (all under 0.1 s), 1000 prompt tokens, busy 2.5 s
    mid = ((0.1, 10.0), (0.5, 10.0), (float("inf"), 10.0))
    figures = stats.add(
        Snapshot(at_s=5, busy_s=2.5, arrived_prompt_tokens=1500, prompt_tokens=1000, ttft=mid)
    )
    assert figures["requests_per_s"] == pytest.approx(2.0)
    assert figures["prompt_tokens_per_s"] == pytest.approx(200)
    assert figures["arrived_prompt_tokens_per_s"] == pytest.approx(300)  # 500 still queued
    assert figures["busy"] == pytest.approx(0.5)
    assert figures["ttft_s"] == pytest.approx(0.09)
    # quiet until 15 s, then 10 slow requests by 25 s; the first ten have left the window
    late = ((0.1, 10.0), (0.5, 20.0), (float("inf"), 20.0))
    stats.add(Snapshot(at_s=15, busy_s=2.5, prompt_tokens=1000, ttft=mid))
    figures = stats.add(Snapshot(at_s=25, busy_s=7.5, prompt_tokens=1000, ttft=late))
    assert figures["requests_per_s"] == pytest.approx(10 / 10)
    assert 0.1 < figures["ttft_s"] <= 0.5
    assert figures["busy"] == pytest.approx(0.5)
    # nothing since: the percentile is 0 and says so through requests_per_s
    figures = stats.add(Snapshot(at_s=40, busy_s=7.5, prompt_tokens=1000, ttft=late))
    assert figures["requests_per_s"] == 0 and figures["ttft_s"] == 0 and figures["busy"] == 0
