"""Private directories for a process's IPC sockets (mode 0700, under the system's temporary
directory), named after the process that made them, so that the next one made on the
host removes those a process killed outright left behind."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path


def private_dir(kind: str) -> str:
    """A new directory ``splitserve-<kind>-<pid>-*`` only this user can enter; first,
    this user's directories of the same kind whose process is gone are removed."""
    sweep(kind)
    return tempfile.mkdtemp(prefix=f"splitserve-{kind}-{os.getpid()}-")


def sweep(kind: str, root: str | None = None) -> list[str]:
    """Remove this user's ``splitserve-<kind>-<pid>-*`` directories under ``root``
    (default: the temporary directory) whose process no longer runs; the removed ones.
    A directory whose pid is in use (by its maker or a process that took the pid since)
    is left alone."""
    named = re.compile(rf"splitserve-{re.escape(kind)}-(\d+)-")
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(f"splitserve-{kind}-*"):
        found = named.match(path.name)
        try:
            mine = path.is_dir() and path.stat().st_uid == os.getuid()
        except OSError:
            continue  # gone meanwhile
        if found is None or not mine or process_alive(int(found.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    return removed


def process_alive(pid: int) -> bool:
    """Whether a process of this pid runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
