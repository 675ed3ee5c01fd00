"""Per-pool utilization over one workload: how busy each pool's engines were.

Two measures, per pool (prefill, decode, colocated, or a peer's engine):

- ``busy_pct``: the share of wall time the pool's engines were stepping, from the app's
  own ``splitserve_engine_busy_seconds_total`` on its ``/metrics`` (mean per replica);
  only splitserve exports it, so peers have none;
- ``cpu_pct``: CPU time of the pool's engine processes (each engine core and the model
  workers it spawned) per wall second (% of one core, summed over replicas). On these
  CPU-only machines that is where the model runs, so this is the compute the pool used;
  every system has it. With vLLM's ``mp`` executor it includes the engine core's polling
  of its workers' queue, which is not model work.

Ray's metrics agents export every ``metrics_report_interval_ms``: run the app with a
short interval (``LocalApp(metrics_report_interval_ms=1000)``) and let :class:`PoolUsage`
wait ``export_lag_s`` around the workload.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from load_tests.systems.process_usage import app_processes

BUSY = "splitserve_engine_busy_seconds_total"


_POOLS = (
    ("Prefill", "prefill"),
    ("Decode", "decode"),
    ("Colocated", "colocated"),
    ("vllm.entrypoints.openai.api_server", "vLLM engine"),
)


def _title(process: psutil.Process) -> str:
    return " ".join(process.cmdline()) + " " + str(process.name())


def _pool_of_engine(process: psutil.Process) -> tuple[str, bool] | None:
    """(pool, whether it is an engine core) of a vLLM engine process (its engine core or a
    model worker of it), from its nearest ancestor with a pool's title; None if not one."""
    try:
        title = _title(process)
        if "EngineCore" not in title and "VLLM::Worker" not in title:
            return None
        for ancestor in process.parents():
            text = _title(ancestor)
            for needle, pool in _POOLS:
                if needle in text:
                    return pool, "EngineCore" in title
    except psutil.Error:
        return None
    return "engine", "EngineCore" in title


def _engine_cpu() -> dict[str, tuple[float, int]]:
    """Pool -> (CPU seconds of its engine processes so far, number of engine cores)."""
    found: dict[str, tuple[float, int]] = {}
    for process in app_processes():
        engine = _pool_of_engine(process)
        if engine is None:
            continue
        pool, is_core = engine
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        seconds, count = found.get(pool, (0.0, 0))
        found[pool] = (seconds + times.user + times.system, count + int(is_core))
    return found


def by_pool(base_url: str, sample: str) -> dict[str, tuple[float, int]] | None:
    """Pool -> (``sample`` summed over replicas, replicas) from the app's ``/metrics``;
    None if it has no such series."""
    try:
        response = httpx.get(f"{base_url}/metrics", timeout=10)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return sum_by_pool(response.text, sample)


def sum_by_pool(page: str, sample: str) -> dict[str, tuple[float, int]] | None:
    """Pool -> (``sample`` summed over replicas, replicas) in a Prometheus text ``page``;
    None if it has no such series."""
    if sample not in page:
        return None
    total: dict[str, float] = defaultdict(float)
    replicas: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(page):
        for found in family.samples:
            if found.name == sample:
                pool = found.labels.get("pool", "")
                total[pool] += found.value
                replicas[pool].add(found.labels.get("replica", ""))
    return {pool: (total[pool], len(replicas[pool])) for pool in total}


def busy_by_pool(base_url: str) -> dict[str, tuple[float, int]] | None:
    """Pool -> (busy seconds so far, replicas) from the app's ``/metrics``; None if it has none."""
    return by_pool(base_url, BUSY)


class PoolUsage:
    """``with PoolUsage(url): run_workload()``; then :attr:`result` is pool -> figures."""

    def __init__(self, base_url: str, export_lag_s: float = 2.5) -> None:
        self.base_url = base_url
        self.export_lag_s = export_lag_s
        self.result: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> PoolUsage:
        time.sleep(self.export_lag_s)  # the previous workload's last steps exported
        self._busy = busy_by_pool(self.base_url)
        self._cpu = _engine_cpu()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._started
        cpu = _engine_cpu()
        time.sleep(self.export_lag_s)
        busy = busy_by_pool(self.base_url)
        for pool, (seconds, count) in cpu.items():
            before = self._cpu.get(pool, (0.0, 0))[0]
            self.result[pool] = {
                "engines": count,
                "cpu_pct": round(100 * (seconds - before) / wall, 1),
            }
        if busy is not None and self._busy is not None:
            for pool, (seconds, replicas) in busy.items():
                before = self._busy.get(pool, (0.0, 0))[0]
                share = (seconds - before) / (wall * max(replicas, 1))
                self.result.setdefault(pool, {})["busy_pct"] = round(100 * share, 1)
