"""One core set per replica: a pool's `cpu_binding` of alternatives (``"0|1"``).

Replicas of one pool are separate processes that Serve starts in any order, so a pool
that is to run one engine per core names the core sets and each replica claims the
first that no live replica on this host holds: a lock file per core set, ``flock``-ed for
the claiming process's life, so the claim ends when the replica does, however it ends.
Where every set is held (more replicas than sets), the replica shares the first set and
says so. A binding without ``|`` is returned as it is.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from pathlib import Path

logger = logging.getLogger("splitserve.engine")

# This process's claims: the binding asked for -> (the set claimed, its lock's descriptor).
_CLAIMED: dict[str, tuple[str, int | None]] = {}


def lock_dir() -> Path:
    """Where the claims' lock files are: per user, shared by every app on this host."""
    path = Path(tempfile.gettempdir()) / f"splitserve-cores-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def alternatives(binding: str) -> list[str]:
    return [part for part in binding.split("|") if part]


def claim(binding: str | None) -> str | None:
    """The core set this process runs its engine on: ``binding`` itself, or for
    alternatives the one claimed (the same on every call in this process)."""
    if binding is None or "|" not in binding:
        return binding
    if binding in _CLAIMED:
        return _CLAIMED[binding][0]
    choices = alternatives(binding)
    for choice in choices:
        fd = os.open(lock_dir() / f"{choice}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _CLAIMED[binding] = (choice, fd)
        logger.info("cpu_binding %r: this replica claimed cores %s", binding, choice)
        return choice
    logger.warning(
        "cpu_binding %r: every core set is held by another replica; sharing cores %s",
        binding,
        choices[0],
    )
    _CLAIMED[binding] = (choices[0], None)
    return choices[0]
