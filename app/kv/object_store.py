"""The replica half of the Ray object-store transport (this module imports Ray).

Prefill: the engine's connector writes the prompt's KV payload to a file in shared memory;
:func:`publish` moves it into the Ray object store and deletes the file. The object is
owned by the prefill replica and freed by Ray's reference counting once the ingress and
the decode replica drop the reference (request done or aborted). If the prefill replica
dies first, Ray may report the object lost (its owner died; decode then recomputes) or,
on the same node, still hand out the copy in the node's store (measured: the KV is used).

Decode: :func:`materialize` fetches the object (zero-copy from the local object store)
into a file the decode engine's connector loads and deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from app.private_dir import process_alive


def payload_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


PREFIX = "splitserve-kv-"


def payload_path(path: object) -> str | None:
    """``path`` if it names a payload file (one made by :func:`new_payload_path`, in
    :func:`payload_dir`), else None: a path from anywhere else is never read, written
    or removed, whoever handed it over."""
    if not isinstance(path, str) or not path:
        return None
    name = os.path.basename(path)
    real_dir = os.path.realpath(os.path.dirname(path))
    if not name.startswith(PREFIX) or real_dir != os.path.realpath(payload_dir()):
        return None
    return os.path.join(real_dir, name)


def create_private(path: str) -> int:
    """A new file at ``path``, readable by this user only (``/dev/shm`` is shared by
    every user of the host); it must not exist yet, nor be a link. Its descriptor."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)


def new_payload_path(kind: str) -> str:
    """A new payload file's path, named after this process (see :func:`sweep_orphans`)."""
    return str(payload_dir() / f"{PREFIX}{os.getpid()}-{kind}-{uuid.uuid4().hex}")


def sweep_orphans(directory: Path | None = None) -> list[Path]:
    """Delete payload files whose process is gone; the paths deleted.

    Every path that wrote a file removes it on its way out, failures and cancellations
    included (an aborted prefill's file by the engine's connector, a cancelled fetch's
    once its thread is done); a file outlives its request only when its replica died in
    between (a SIGKILL between the engine's write and the publish). Replicas sweep as
    they start.
    """
    removed = []
    for path in (directory or payload_dir()).glob(f"{PREFIX}*"):
        owner = path.name[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and process_alive(int(owner)):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def remove(path: str) -> None:
    for candidate in (path, path + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(candidate)


async def publish(path: str) -> tuple[Any, int, float]:
    """Put the payload file at ``path`` into the object store; return (ref, bytes, seconds)."""
    import ray

    def put() -> tuple[Any, int, float]:
        started = time.perf_counter()
        try:
            data = np.fromfile(path, dtype=np.uint8)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"the prefill engine wrote no KV payload at {path}") from exc
        ref = ray.put(data)
        return ref, int(data.nbytes), time.perf_counter() - started

    try:
        return await asyncio.to_thread(put)
    finally:
        remove(path)


async def materialize(ref: Any, path: str) -> tuple[int, float]:
    """Fetch the payload object into a file at ``path``; return (bytes, seconds)."""
    started = time.perf_counter()
    data = await ref
    if not isinstance(data, np.ndarray):
        raise TypeError(f"KV payload object holds {type(data).__name__}, not a byte array")
    tmp = path + ".tmp"

    def write() -> None:
        try:
            with os.fdopen(create_private(tmp), "wb") as out:
                data.tofile(out)
            os.replace(tmp, path)
        except BaseException:
            remove(path)
            raise

    # A cancelled await does not stop the thread: once it is done, remove what it wrote
    # (the caller's own clean-up may have run before the thread created the file).
    writing = asyncio.ensure_future(asyncio.to_thread(write))
    try:
        await asyncio.shield(writing)
    except asyncio.CancelledError:
        writing.add_done_callback(lambda _: remove(path))
        raise
    return int(data.nbytes), time.perf_counter() - started
