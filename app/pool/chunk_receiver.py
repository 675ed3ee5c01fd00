"""The ingress's end of the direct token stream: chunks pushed by replicas on its host.

A Serve streaming call costs each chunk a pickle, a gRPC message and an unpickle on top
of Serve's own bookkeeping, in both processes (docs/performance.md, section 16). With
``request_path.direct_stream`` the ingress opens one ZeroMQ PULL socket in a directory
only its user can open (no network listener) and names it in each request
(:class:`~app.pool.records.StreamTo`). A replica on the same host pushes the stream's
token chunks there (:mod:`app.pool.chunk_sender`); everything else stays a Serve call:
the replica is chosen, queued, cancelled, scaled and health-checked by Serve, its
:class:`~app.pool.records.Started` and its errors come back through it, and its last
item, :class:`~app.pool.records.DirectEnd`, says how many chunks it pushed. A replica on
another host ignores the socket and yields every chunk through Serve.

:meth:`ChunkReceiver.stream` merges the two: Serve's items in their order, the pushed
chunks after the first of them (a chunk may overtake the ``Started`` sent before it),
and the end once the count has arrived. An error from Serve ends the stream at once (the
chunks it overtook are dropped, as a dead replica's would be: migration resumes from
what the client got). Closing the stream cancels the Serve call, which aborts the
request in the replica's engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
import shutil
from collections.abc import AsyncIterator, Callable
from typing import Any

from app.pool.records import DirectEnd, StreamTo
from app.private_dir import private_dir

logger = logging.getLogger("splitserve.chunk_receiver")

# How long the ingress waits, after the replica's call ended, for chunks the replica
# said it pushed. They were written to a local socket before the call returned, so they
# are late only on a host too busy to schedule the reader.
LATE_S = 10.0

_SERVED, _PUSHED, _ENDED, _FAILED = range(4)


class ChunksLost(RuntimeError):
    """A replica said it pushed chunks that never arrived."""


class ChunkReceiver:
    """One PULL socket per ingress process; one queue per stream in flight."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.directory = private_dir("streams")  # mode 0700
        self.path = f"{self.directory}/chunks"
        self.received = 0  # chunks read from the socket
        self.undeliverable = 0  # of them, for a stream that had already ended
        self._ids = itertools.count(1)
        self._queues: dict[int, asyncio.Queue[tuple[int, Any]]] = {}
        self._context: Any = None
        self._socket: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def stream(self, call: Callable[[StreamTo], AsyncIterator[Any]]) -> AsyncIterator[Any]:
        """The items of ``call(target)``, a Serve streaming call, merged with the chunks
        its replica pushes to ``target``."""
        self._start()
        target = StreamTo(self.node_id, self.path, next(self._ids))
        queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self._queues[target.stream_id] = queue
        pump = asyncio.ensure_future(_pump(call(target), queue))
        del call  # it may hold the request's object-store KV, which must not stay pinned here
        try:
            held: list[Any] = []  # pushed before Serve's first item arrived
            served = False
            expected: int | None = None
            pushed = 0
            while expected is None or pushed < expected:
                if expected is None:
                    kind, item = await queue.get()
                else:
                    try:
                        async with asyncio.timeout(LATE_S):
                            kind, item = await queue.get()
                    except TimeoutError:
                        raise ChunksLost(
                            f"the replica pushed {expected} chunks and {pushed} arrived "
                            f"within {LATE_S:g} s"
                        ) from None
                if kind == _PUSHED:
                    pushed += 1
                    if served:
                        yield item
                    else:
                        held.append(item)
                elif kind == _SERVED:
                    if isinstance(item, DirectEnd):
                        expected = item.count
                    else:
                        yield item
                    if not served:
                        served = True
                        for chunk in held:
                            yield chunk
                        held.clear()
                elif kind == _ENDED:
                    if expected is None:
                        return  # every item came through Serve
                else:
                    raise item
        finally:
            del self._queues[target.stream_id]
            pump.cancel()

    def _start(self) -> None:
        if self._reader is not None:
            return
        import zmq
        import zmq.asyncio

        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(f"ipc://{self.path}")
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            try:
                frame = await self._socket.recv()
            except Exception:  # the reader must outlive one bad read: every stream needs it
                logger.exception("the stream socket failed a read; reading on")
                await asyncio.sleep(0.1)
                continue
            self.received += 1
            try:
                stream_id, item = pickle.loads(frame)
            except Exception:
                logger.exception("dropped a chunk this ingress could not read")
                continue
            queue = self._queues.get(stream_id)
            if queue is None:
                self.undeliverable += 1  # its stream was closed or failed first
            else:
                queue.put_nowait((_PUSHED, item))

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            self._socket.close(linger=0)
            self._context.term()
            self._reader = None
        shutil.rmtree(self.directory, ignore_errors=True)


async def _pump(items: AsyncIterator[Any], queue: asyncio.Queue[tuple[int, Any]]) -> None:
    """Serve's side of one stream into its queue; cancelled, it cancels the call."""
    try:
        async for item in items:
            queue.put_nowait((_SERVED, item))
    except Exception as exc:
        queue.put_nowait((_FAILED, exc))
    else:
        queue.put_nowait((_ENDED, None))
    finally:
        with contextlib.suppress(Exception):
            await items.aclose()  # type: ignore[attr-defined]
