"""What a replica reads of its own engine, kept as the engine steps: no registry scan.

The replica needs a handful of its engine's figures: the scheduler's queue and KV usage
(the KV-capacity router, every poll), prompt tokens, TTFT and inter-token latency (the
SLO autoscaling policy, :mod:`app.scaling.autoscaling_stats`, every metrics push), and a
few counters for tests and benchmarks (prefix-cache hits, NIXL bytes and time).

It used to read them by collecting this process's whole Prometheus registry, which a
second vLLM stat logger (``PrometheusStatLogger``) filled on every engine step: two
loggers per step, and a scan of a few thousand samples several times a second for a
dozen numbers. :class:`EngineTally` replaces both: plain numbers and fixed-bucket
histograms, updated from each step's stats by the one stat logger the engine has (Ray's
export, :func:`app.observability.engine_metrics.pool_stat_logger`, which still records
every vLLM metric for dashboards), and read without a scan.

Counter names are vLLM's Prometheus sample names (``vllm:prefix_cache_hits_total``,
``vllm:nixl_bytes_transferred_sum``...), so what :meth:`EngineTally.counters` returns reads
as the registry did.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from app.scaling.autoscaling_stats import Buckets, Snapshot

# vLLM 0.32's default bounds (vllm.v1.metrics.buckets), so percentiles read as they did.
TTFT_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BOUNDS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip


class Histogram:
    """Counts per fixed upper bound (the last bucket is ``+Inf``), Prometheus-style."""

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self._counts)

    def cumulative(self) -> Buckets:
        """(upper bound, cumulative count) ascending, ``+Inf`` last."""
        out: list[tuple[float, float]] = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self._counts, strict=True):
            total += count
            out.append((bound, float(total)))
        return tuple(out)


class EngineTally:
    """An engine's figures as of its last step. Written by the engine's output loop (the
    stat logger's ``record``), read by the replica's methods; a lock keeps a reader from
    seeing half a step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.waiting = 0  # for room in the batch
        self.deferred = 0  # for their KV to arrive
        self.kv_usage = 0.0
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0
        self.ttft = Histogram(TTFT_BOUNDS)
        self.itl = Histogram(ITL_BOUNDS)
        self._counters: dict[str, float] = {}

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        """One step's stats (vLLM's ``SchedulerStats`` and ``IterationStats``, either None)."""
        with self._lock:
            if scheduler_stats is not None:
                self._scheduler(scheduler_stats)
            if iteration_stats is not None:
                self._iteration(iteration_stats)

    def _add(self, name: str, value: float) -> None:
        if value:
            self._counters[name] = self._counters.get(name, 0.0) + value

    def _scheduler(self, stats: Any) -> None:
        self.running = stats.num_running_reqs
        self.waiting = stats.num_waiting_reqs
        self.deferred = stats.num_skipped_waiting_reqs
        self.kv_usage = stats.kv_cache_usage
        prefix = stats.prefix_cache_stats
        self._add("vllm:prefix_cache_queries_total", prefix.queries)
        self._add("vllm:prefix_cache_hits_total", prefix.hits)
        external = stats.connector_prefix_cache_stats
        if external is not None:
            self._add("vllm:external_prefix_cache_queries_total", external.queries)
            self._add("vllm:external_prefix_cache_hits_total", external.hits)
        if stats.kv_connector_stats:
            for nixl in _nixl_stats(stats.kv_connector_stats):
                durations = nixl.get("transfer_duration") or ()
                moved = nixl.get("bytes_transferred") or ()
                self._add("vllm:nixl_xfer_time_seconds_sum", sum(durations))
                self._add("vllm:nixl_xfer_time_seconds_count", len(durations))
                self._add("vllm:nixl_bytes_transferred_sum", sum(moved))
                self._add("vllm:nixl_bytes_transferred_count", len(moved))
                failed = nixl.get("num_failed_transfers") or ()
                self._add("vllm:nixl_num_failed_transfers_total", len(failed))

    def _iteration(self, stats: Any) -> None:
        self.prompt_tokens += stats.num_prompt_tokens
        self.cached_prompt_tokens += stats.prompt_token_stats.cached_tokens
        for ttft in stats.time_to_first_tokens_iter:
            self.ttft.observe(ttft)
        for itl in stats.inter_token_latencies_iter:
            self.itl.observe(itl)
        for finished in stats.finished_requests:
            self._add("vllm:request_success_total", 1)
            reason = getattr(finished.finish_reason, "name", str(finished.finish_reason))
            self._add(f"vllm:request_success_total:{reason.lower()}", 1)

    def counters(self) -> dict[str, float]:
        """Cumulative counters and the scheduler's gauges, by vLLM's sample names."""
        with self._lock:
            return {
                **self._counters,
                "vllm:num_requests_running": float(self.running),
                "vllm:num_requests_waiting": float(self.waiting + self.deferred),
                "vllm:kv_cache_usage_perc": self.kv_usage,
            }

    def snapshot(self, busy_s: float, at_s: float, arrived_prompt_tokens: float) -> Snapshot:
        """The autoscaling policy's cumulative reading (:class:`WindowStats` differences
        two of them)."""
        with self._lock:
            return Snapshot(
                at_s=at_s,
                busy_s=busy_s,
                arrived_prompt_tokens=arrived_prompt_tokens,
                prompt_tokens=float(self.prompt_tokens),
                cached_prompt_tokens=float(self.cached_prompt_tokens),
                ttft=self.ttft.cumulative(),
                itl=self.itl.cumulative(),
                gauges={
                    "running": float(self.running),
                    "waiting": float(self.waiting),
                    "kv_usage": self.kv_usage,
                },
            )


def _nixl_stats(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """NIXL's stats dicts inside a connector's stats: the dict itself (NixlConnector), or
    one per connector (MultiConnector: ``{connector name: its data}``)."""
    if "bytes_transferred" in data or "transfer_duration" in data:
        yield data
        return
    for value in data.values():
        if isinstance(value, dict):
            yield from _nixl_stats(value)
