"""An idle engine leaves the CPU alone (NIXL's progress thread would keep a core busy)."""

import time

import psutil

from tests.integration.faults import call


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def test_idle_disaggregated_engines_do_not_spin(apps):
    # A busy-polling thread shows as ~100% of a core; an idle engine uses a few %.
    for deployment in ("Prefill", "Decode"):
        info = call(deployment, "process_info")
        pids = [info["pid"], *info["children"]]
        time.sleep(1)  # let the previous test's stragglers finish
        before, started = _cpu_seconds(pids), time.monotonic()
        time.sleep(3)
        share = (_cpu_seconds(pids) - before) / (time.monotonic() - started)
        assert share < 0.3, f"{deployment} used {share:.0%} of a core while idle"
