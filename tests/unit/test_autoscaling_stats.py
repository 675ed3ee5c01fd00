"""An engine replica's figures for the SLO policy (app.scaling.autoscaling_stats)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.scaling.autoscaling_stats import Snapshot, WindowStats, histogram_percentile, snapshot_from


def test_histogram_percentile_interpolates_inside_the_bucket():
    buckets = ((0.1, 0.0), (0.2, 10.0), (0.4, 20.0), (float("inf"), 20.0))
    assert histogram_percentile(buckets, 0.25) == pytest.approx(0.15)
    assert histogram_percentile(buckets, 0.9) == pytest.approx(0.2 + 0.2 * 0.8)
    assert histogram_percentile(((0.1, 0.0), (float("inf"), 0.0)), 0.9) is None
    # beyond the last finite bound: that bound
    assert histogram_percentile(((0.1, 1.0), (float("inf"), 10.0)), 0.9) == 0.1


def _registry(ttft: list[float], itl: list[float], prompt: int, running: int):
    registry = CollectorRegistry()
    h = Histogram(
        "vllm:time_to_first_token_seconds",
        "",
        ["engine"],
        buckets=[0.1, 0.5, 1.0],
        registry=registry,
    )
    i = Histogram(
        "vllm:inter_token_latency_seconds",
        "",
        ["engine"],
        buckets=[0.01, 0.05, 0.1],
        registry=registry,
    )
    # two label sets (two engines in one process) are summed
    for value in ttft:
        h.labels("0").observe(value)
    for value in itl:
        i.labels("1").observe(value)
    Counter("vllm:prompt_tokens", "", ["engine"], registry=registry).labels("0").inc(prompt)
    Gauge("vllm:num_requests_running", "", ["engine"], registry=registry).labels("0").set(running)
    waiting = Gauge(
        "vllm:num_requests_waiting_by_reason", "", ["engine", "reason"], registry=registry
    )
    waiting.labels("0", "capacity").set(2)
    waiting.labels("0", "deferred").set(5)  # waiting for KV: not a full batch
    return registry


def test_snapshot_reads_vllms_series():
    snap = snapshot_from(_registry([0.05, 0.3], [0.02] * 4, 700, 3).collect(), 1.5, 10.0)
    assert snap.prompt_tokens == 700
    assert snap.ttft[-1] == (float("inf"), 2.0)
    assert snap.itl[1] == (0.05, 4.0)
    assert snap.gauges["running"] == 3
    assert snap.gauges["waiting"] == 2
    assert snap.busy_s == 1.5


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
