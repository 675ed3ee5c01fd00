"""vLLM's engine metrics in Ray's metrics system, labelled by pool, plus each engine's busy time.

vLLM's ``RayPrometheusStatLogger`` already records every engine metric (requests running
and waiting, KV-cache usage, prefix-cache hits, preemptions, the KV connector's transfer
metrics) through ``ray.util.metrics``, labelled with the Serve replica (``ReplicaId``).
:func:`pool_stat_logger` adds ``pool`` (prefill / decode / colocated) and ``application``
(the Serve application) labels, and one series of the project's own:

- ``splitserve_engine_busy_seconds`` (exported as ``ray_splitserve_engine_busy_seconds_total``):
  wall time during which the engine was stepping: from a request's arrival at an idle
  engine, and while a request is running (a continuous-batching engine steps back to
  back while anything runs). Its rate is the engine's utilization. vLLM's own
  per-iteration timing is not used: with the ``uni`` executor it times only the wait for
  an output the forward pass already produced.

Ray's metrics agent exports them as ``ray_vllm_<name>``; ``/metrics`` on the API port
serves them under vLLM's own names (:mod:`app.observability.metrics_page`).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from app.observability.engine_tally import EngineTally

_log = logging.getLogger("splitserve.engine")

# How often an idle engine's gauges are set again (Ray drops them after 2 export intervals).
GAUGE_REFRESH_S = 5.0


class BusyClock:
    """Wall seconds an engine was stepping, from the scheduler's report after each step.

    Between two reports the engine was busy if the first left a request running (it
    stepped through it). A report that follows idle time counts from when work arrived
    (:meth:`submitted`), so a request served in one step (a prefill) counts too.
    ``clock`` is injectable for tests.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = 0.0
        self._clock = clock
        self._last: float | None = None
        self._running = False
        self._work_since: float | None = None

    def submitted(self) -> None:
        """A request was handed to the engine."""
        if not self._running and self._work_since is None:
            self._work_since = self._clock()

    def step(self, num_running: int) -> float:
        """Record one step's report; returns the busy seconds it added."""
        now = self._clock()
        since = self._last if self._running else self._work_since
        if since is not None and self._last is not None and not self._running:
            since = max(since, self._last)
        added = now - since if since is not None else 0.0
        self.seconds += added
        self._last = now
        self._running = num_running > 0
        self._work_since = None
        return added


def pool_stat_logger(
    pool: str, clock: BusyClock, application: str = "", tally: EngineTally | None = None
) -> type[Any]:
    """A vLLM stat-logger class recording to Ray with ``pool`` and ``application`` labels,
    counting the engine's busy time on ``clock``, and keeping the figures the replica
    reads in ``tally`` (:mod:`app.observability.engine_tally`): one logger per step.

    Pass it in ``AsyncLLM``'s ``stat_loggers``. The class is built here so that vLLM and
    Ray are imported only when an engine starts.
    """
    from ray.util import metrics
    from vllm.v1.metrics import ray_wrappers as rw

    added = {"pool": pool, "application": application}

    class _PoolTagged(rw.RayPrometheusMetric):
        """Adds the ``pool`` and ``application`` tags; vLLM's positional labels still fit."""

        @staticmethod
        def _get_tag_keys(labelnames: list[str] | None) -> tuple[str, ...]:
            return (*rw.RayPrometheusMetric._get_tag_keys(labelnames), *added)

        def _build_tags(self, *labels: Any, **labelskwargs: Any) -> dict[str, str]:
            keys = self.metric._tag_keys
            own = len(keys) - 1 - len(added)  # vLLM's labels: all but ReplicaId and ours
            if labels:
                if len(labels) != own:
                    raise ValueError(f"expected {own} labels, got {len(labels)}")
                labelskwargs.update(zip(keys, labels, strict=False))
            return {**super()._build_tags(**labelskwargs), **added}

        def _set_pool_default(self) -> None:
            self.metric.set_default_tags({**added, "ReplicaId": rw._get_replica_id() or ""})

    class Gauge(_PoolTagged, rw.RayGaugeWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._set_pool_default()

    class Counter(_PoolTagged, rw.RayCounterWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._set_pool_default()

    class Histogram(_PoolTagged, rw.RayHistogramWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._set_pool_default()

    class KVConnectorProm(rw.RayKVConnectorProm):
        _gauge_cls = Gauge
        _counter_cls = Counter
        _histogram_cls = Histogram

    class SpecDecodingProm(rw.RaySpecDecodingProm):
        _counter_cls = Counter

    class PerfMetricsProm(rw.RayPerfMetricsProm):
        _counter_cls = Counter

    busy = metrics.Counter(
        "splitserve_engine_busy_seconds",
        description="Wall seconds the engine was stepping (from a request's arrival at an "
        "idle engine, and while any request runs); its rate is the engine's utilization.",
        tag_keys=("pool", "application", "ReplicaId"),
    )

    class PoolStatLogger(rw.RayPrometheusStatLogger):
        _gauge_cls = Gauge
        _counter_cls = Counter
        _histogram_cls = Histogram
        _spec_decoding_cls = SpecDecodingProm
        _kv_connector_cls = KVConnectorProm
        _perf_metrics_cls = PerfMetricsProm

        def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
            super().__init__(vllm_config, engine_indexes)
            _start_counters_at_zero(self)
            # engine index -> (running, waiting, KV-cache usage) after its last step
            self.last_state: dict[int, tuple[int, int, float]] = {}
            # A refresh never sets a gauge back to a value older than a step's.
            self.gauge_lock = threading.Lock()
            keep_gauges_alive(weakref.ref(self))

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if tally is not None:
                tally.record(scheduler_stats, iteration_stats)
            if scheduler_stats is not None:
                seconds = clock.step(scheduler_stats.num_running_reqs)
                if seconds > 0:
                    busy.inc(seconds, tags={**added, "ReplicaId": rw._get_replica_id() or ""})
            with self.gauge_lock:
                if scheduler_stats is not None:
                    self.last_state[engine_idx] = (
                        scheduler_stats.num_running_reqs,
                        scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs,
                        scheduler_stats.kv_cache_usage,
                    )
                super().record(scheduler_stats, iteration_stats, mm_cache_stats, engine_idx)

        def refresh_gauges(self) -> None:
            """Set the queue and KV-usage gauges again to their last values."""
            gauges: Any = self  # vLLM types its per-engine metrics as any metric kind
            with self.gauge_lock:
                for idx, (running, waiting, usage) in list(self.last_state.items()):
                    gauges.gauge_scheduler_running[idx].set(running)
                    gauges.gauge_scheduler_waiting[idx].set(waiting)
                    gauges.gauge_kv_cache_usage[idx].set(usage)

    return PoolStatLogger


def _start_counters_at_zero(stat_logger: Any) -> None:
    """Export every vLLM counter of this engine at 0 now (``vllm:num_preemptions`` and
    the rest), not at its first event: a dashboard shows 0, not "No data"
    (:mod:`app.observability.metric_zero`). vLLM keeps them as ``counter_*`` attributes,
    one labelled counter per engine index."""
    from app.observability.metric_zero import start_at_zero

    for name, per_engine in vars(stat_logger).items():
        if not name.startswith("counter_") or not isinstance(per_engine, dict):
            continue
        for counter in per_engine.values():
            metric = getattr(counter, "metric", None)
            tags = getattr(counter, "_tags", None)
            if metric is not None and isinstance(tags, dict):
                start_at_zero(metric, [tags])


def keep_gauges_alive(logger: weakref.ref[Any]) -> None:
    """Re-set an idle engine's gauges every ``GAUGE_REFRESH_S`` while the logger lives.

    Ray's metrics export drops a gauge not set for two export intervals (20 s by
    default), and vLLM sets its gauges only when the engine steps: without this, an idle
    engine's queue depth and KV usage would vanish instead of reading 0.
    """

    def run() -> None:
        failed = False
        while (alive := logger()) is not None:
            try:
                alive.refresh_gauges()
                failed = False
            except Exception:  # one bad refresh must not end them for good
                if not failed:
                    _log.exception("refreshing the engine's gauges failed; trying again")
                failed = True
            del alive
            time.sleep(GAUGE_REFRESH_S)

    threading.Thread(target=run, name="splitserve-gauges", daemon=True).start()
