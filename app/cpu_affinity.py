"""Pinning a whole process (every thread it has now, and those it starts later) to cores.

Used for the ingress replica (`ingress.cpu_affinity`): on a machine with cores to spare,
the HTTP front end can be kept off the engines' cores. Linux only.
"""

from __future__ import annotations

import os

CORE_LIST = r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$"


def parse_cores(spec: str) -> set[int]:
    """``"0"``, ``"2-5"``, ``"0,2-3"`` -> the set of core numbers."""
    cores: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low:
            raise ValueError(f"core range {part!r} runs backwards")
        cores.update(range(low, high + 1))
    return cores


def pin_process(spec: str, field: str) -> set[int]:
    """Bind every thread of this process to the cores in ``spec``; returns them.

    Threads started afterwards inherit the binding from the thread that starts them.
    Only cores this process may run on count (its own allowed set, which containers and
    cgroups narrow). Raises ValueError naming ``field`` when none of the cores is allowed,
    and OSError when a live thread cannot be bound: nothing is reported bound that is not.
    """
    wanted = parse_cores(spec)
    allowed = os.sched_getaffinity(0)
    cores = wanted & allowed
    if not cores:
        raise ValueError(f"{field}={spec!r}: this process may run on cores {sorted(allowed)}")
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    return cores
