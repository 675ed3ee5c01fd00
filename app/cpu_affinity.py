"""Pinning a whole process (every thread it has now, and those it starts later) to cores.

Used for the ingress replica (`ingress.cpu_affinity`): on a machine with cores to spare,
the HTTP front end can be kept off the engines' cores; and for the engines a replica
starts (a pool's `cpu_binding`, :mod:`app.engine.binding`). Linux only.
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


def allowed_cores(spec: str, field: str) -> set[int]:
    """The cores of ``spec`` this process may run on (its allowed set, which containers and
    cgroups narrow); ValueError naming ``field`` when there is none."""
    wanted = parse_cores(spec)
    allowed = os.sched_getaffinity(0)
    cores = wanted & allowed
    if not cores:
        raise ValueError(f"{field}={spec!r}: this process may run on cores {sorted(allowed)}")
    return cores


def bind_threads(pid: int | str, cores: set[int]) -> None:
    """Bind every live thread of process ``pid`` (``"self"``: this one) to ``cores``.

    Threads started afterwards inherit the binding from the thread that starts them.
    Raises OSError when a live thread cannot be bound; a thread or process that ended
    meanwhile is skipped.
    """
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:  # the process ended
        return
    for thread in threads:
        try:
            os.sched_setaffinity(int(thread), cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def pin_process(spec: str, field: str) -> set[int]:
    """Bind every thread of this process to the cores in ``spec``; returns them.

    Only cores this process may run on count. Raises ValueError naming ``field`` when none
    of the cores is allowed, and OSError when a live thread cannot be bound: nothing is
    reported bound that is not.
    """
    cores = allowed_cores(spec, field)
    bind_threads("self", cores)
    return cores


def pin_children(spec: str, field: str, parent: int | None = None) -> tuple[set[int], list[int]]:
    """Bind every thread of every process this one (or ``parent``) started, at any depth,
    to ``spec``'s cores; returns the cores and the PIDs bound. Errors as
    :func:`pin_process`."""
    import psutil

    cores = allowed_cores(spec, field)
    pids = [child.pid for child in psutil.Process(parent).children(recursive=True)]
    for pid in pids:
        bind_threads(pid, cores)
    return cores, pids
