"""CPU and memory of the processes that make up a running app (Ray's, vLLM's, a server's).

Groups processes by role from their command line or title, so a report reads "engine
core", "Decode replica", "Serve proxy", ... rather than PIDs. Used by the path profile
and the side-by-side comparison (idle CPU, RSS).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import psutil

# (substring of the command line or process title, group name), first match wins.
_GROUPS = (
    ("EngineCore", "engine core"),
    ("VLLM::Worker", "engine worker"),
    ("vllm.entrypoints.openai.api_server", "vLLM API server"),
    ("ServeReplica:splitserve:Prefill", "Prefill replica"),
    ("ServeReplica:splitserve:Decode", "Decode replica"),
    ("ServeReplica:splitserve:Colocated", "Colocated replica"),
    ("ServeReplica:splitserve:Ingress", "Ingress replica"),
    ("ProxyActor", "Serve proxy"),
    ("ServeController", "Serve controller"),
    ("raylet", "raylet"),
    ("gcs_server", "GCS"),
    ("dashboard", "dashboard/agents"),
    ("DashboardAgent", "dashboard/agents"),
    ("RuntimeEnvAgent", "dashboard/agents"),
    ("runtime_env", "dashboard/agents"),
    ("log_monitor", "log monitor"),
    ("default_worker", "idle Ray worker"),
    ("ray::IDLE", "idle Ray worker"),
)


def group_of(process: psutil.Process) -> str:
    try:
        text = " ".join(process.cmdline()) + " " + process.name()
    except psutil.Error:
        return "gone"
    for needle, group in _GROUPS:
        if needle in text:
            return group
    return f"other: {process.name()}"


def app_processes() -> list[psutil.Process]:
    """This driver's descendants plus Ray's daemons (started by ray.init, reparented)."""
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True)}
    for process in psutil.process_iter():
        try:
            text = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if process.pid != me.pid and ("/ray/" in text or "ray::" in text):
            found[process.pid] = process
            for child in process.children(recursive=True):
                found[child.pid] = child
    return list(found.values())


class CpuSpent:
    """CPU seconds each group spent inside the ``with`` block (processes that exist when
    it starts), and the block's wall time: ``with CpuSpent() as spent: ...``, then
    ``spent.seconds``, ``spent.percent()`` and, per group, ``spent.by_group`` (each
    process's PID and seconds)."""

    def __enter__(self) -> CpuSpent:
        self._before: dict[int, tuple[psutil.Process, float]] = {}
        for process in app_processes():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                self._before[process.pid] = (process, times.user + times.system)
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._started
        seconds: dict[str, float] = defaultdict(float)
        self.by_group: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for process, start in self._before.values():
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            group = group_of(process)
            spent = times.user + times.system - start
            seconds[group] += spent
            self.by_group[group].append((process.pid, spent))
        self.seconds = dict(sorted(seconds.items(), key=lambda item: -item[1]))

    def percent(self) -> dict[str, float]:
        """% of one core each group used over the block's wall time."""
        return {group: 100 * s / self.wall_s for group, s in self.seconds.items()}


def cpu_by_group(seconds: float) -> dict[str, float]:
    """% of one core each group used over ``seconds`` of wall time."""
    with CpuSpent() as spent:
        time.sleep(seconds)
    return spent.percent()


def memory_by_group(kind: str = "rss") -> dict[str, float]:
    """Memory per group in MiB: ``rss`` (shared pages counted in every process that maps
    them, as `ps` shows) or ``pss`` (shared pages split between their users; sums to
    what the app really occupies)."""
    total: dict[str, float] = defaultdict(float)
    for process in app_processes():
        with contextlib.suppress(psutil.Error):
            info = process.memory_full_info() if kind == "pss" else process.memory_info()
            total[group_of(process)] += getattr(info, kind) / 2**20
    return dict(sorted(total.items(), key=lambda item: -item[1]))
