"""A replica's end of the direct token stream (:mod:`app.pool.chunk_receiver`).

A replica on the ingress's host pushes each token chunk to the ingress's socket instead
of yielding it through Serve; one on another host, or one whose ingress named no socket,
yields as before. Sends never block the replica's event loop: a chunk the socket cannot
take (the ingress stopped reading, or is gone) ends the stream with
:class:`ChunksUndelivered`, which aborts the request in the engine.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import zmq

from app.pool.records import StreamTo

# Chunks queued for one ingress before a send fails. The ingress reads its socket on its
# event loop, so only an ingress that stopped reads that far behind.
HIGH_WATER = 100_000


class ChunksUndelivered(RuntimeError):
    """The ingress's socket did not take a chunk."""


class ChunkSender:
    """One PUSH socket per ingress this replica streams to."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._context: Any = None
        self._sockets: dict[str, Any] = {}

    def reaches(self, target: StreamTo | None) -> bool:
        """Whether chunks for ``target`` can be pushed from here (same host, socket there)."""
        return target is not None and target.node_id == self.node_id and os.path.exists(target.path)

    def send(self, target: StreamTo, item: Any) -> None:
        frame = pickle.dumps((target.stream_id, item), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._socket(target.path).send(frame, zmq.NOBLOCK)
        except zmq.Again:
            raise ChunksUndelivered(
                f"the ingress at {target.path} is not reading its stream socket"
            ) from None

    def _socket(self, path: str) -> Any:
        socket = self._sockets.get(path)
        if socket is not None:
            return socket
        if self._context is None:
            self._context = zmq.Context()
        for gone in [p for p in self._sockets if not os.path.exists(p)]:
            self._sockets.pop(gone).close(linger=0)  # an ingress that stopped
        socket = self._context.socket(zmq.PUSH)
        socket.setsockopt(zmq.SNDHWM, HIGH_WATER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(f"ipc://{path}")
        self._sockets[path] = socket
        return socket

    def close(self) -> None:
        for socket in self._sockets.values():
            socket.close(linger=0)
        self._sockets.clear()
        if self._context is not None:
            self._context.term()
            self._context = None
