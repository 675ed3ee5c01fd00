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
    Raises ValueError naming ``field`` when none of the cores is usable on this node.
    """
    wanted = parse_cores(spec)
    usable = os.sched_getaffinity(0) | set(range(os.cpu_count() or 0))
    if not wanted & usable:
        raise ValueError(f"{field}={spec!r}: this node has cores {sorted(usable)}")
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), wanted & usable)
        except (ProcessLookupError, OSError):  # a thread that ended meanwhile
            continue
    return wanted & usable
