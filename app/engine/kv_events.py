"""An engine's KV events, read in its own replica.

With ``router.prefix_source: kv_events`` each engine publishes vLLM's KV events
(``kv_events_config``) on two IPC sockets in a directory only this user can open (no
network listener): the events (PUB) and their replay (ROUTER, the last 10,000 batches).
:class:`KvEventReader` subscribes in the replica's process and keeps
:class:`~app.routing.engine_blocks.EngineBlocks`, which the ingress reads.

Every batch carries a sequence number. A batch after a gap (ZeroMQ drops what a slow
subscriber cannot take; the first batches can go before the subscription is up) makes
the reader ask the replay socket for what it missed; what the replay no longer holds
makes it forget everything and start a new epoch (``EngineBlocks.lost``), since a missed
eviction would list a block the engine no longer holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from dataclasses import dataclass
from typing import Any

from app.private_dir import private_dir
from app.routing.engine_blocks import EngineBlocks

logger = logging.getLogger("splitserve.kv_events")

REPLAY_TIMEOUT_S = 2.0
ERROR_PAUSE_S = 1.0
END_SEQ = -1


@dataclass(frozen=True)
class EventSockets:
    """Where an engine publishes its KV events, in a private directory."""

    directory: str
    endpoint: str
    replay_endpoint: str

    @classmethod
    def make(cls) -> EventSockets:
        directory = private_dir("kv-events")  # mode 0700
        return cls(directory, f"ipc://{directory}/events", f"ipc://{directory}/replay")

    def engine_config(self) -> Any:
        """vLLM's ``KVEventsConfig`` that publishes here."""
        from vllm.config import KVEventsConfig

        return KVEventsConfig(
            enable_kv_cache_events=True,
            publisher="zmq",
            endpoint=self.endpoint,
            replay_endpoint=self.replay_endpoint,
        )

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class KvEventReader:
    """Subscribes to one engine's KV events and applies them to ``blocks``."""

    def __init__(self, sockets: EventSockets, blocks: EngineBlocks) -> None:
        import msgspec
        import zmq.asyncio
        from vllm.distributed.kv_events import KVEventBatch

        self.sockets = sockets
        self.blocks = blocks
        self.batches = 0  # applied
        self.replayed = 0  # batches recovered from the replay socket
        self.lost = 0  # times events were lost beyond the replay
        self._decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self._context = zmq.asyncio.Context()
        self._sub = self._context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.connect(sockets.endpoint)
        self._next = 0  # the sequence number expected next
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kv-events")

    async def _run(self) -> None:
        while True:
            try:
                _, seq_bytes, payload = await self._sub.recv_multipart()
                seq = int.from_bytes(seq_bytes, "big", signed=True)
                if seq > self._next:
                    await self._catch_up(seq)
                if seq >= self._next:
                    self._apply(seq, payload)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bad batch must not stop the reader: start over
                logger.exception("reading the engine's KV events failed; forgetting its blocks")
                self.blocks.lost()
                self.lost += 1
                await asyncio.sleep(ERROR_PAUSE_S)  # an error that repeats must not spin
            async with self._changed:
                self._changed.notify_all()

    async def changed(self, timeout_s: float) -> None:
        """Wait until the blocks change (a batch applied, or lost), ``timeout_s`` at most."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)

    def _apply(self, seq: int, payload: bytes) -> None:
        self.blocks.apply(self._decoder.decode(payload).events)
        self.batches += 1
        self._next = seq + 1

    async def _catch_up(self, upto: int) -> None:
        """Ask the replay socket for the batches from the one expected up to ``upto``."""
        import zmq

        replay = self._context.socket(zmq.DEALER)
        replay.setsockopt(zmq.LINGER, 0)
        try:
            replay.connect(self.sockets.replay_endpoint)
            await replay.send_multipart([b"", self._next.to_bytes(8, "big")])
            async with asyncio.timeout(REPLAY_TIMEOUT_S):
                while True:
                    _, _, seq_bytes, payload = await replay.recv_multipart()
                    seq = int.from_bytes(seq_bytes, "big", signed=True)
                    if seq == END_SEQ or seq >= upto:
                        break
                    if seq > self._next:
                        break  # the replay no longer reaches back far enough
                    if seq == self._next:
                        self._apply(seq, payload)
                        self.replayed += 1
        except TimeoutError:
            pass
        finally:
            replay.close()
        if self._next < upto:
            logger.warning(
                "lost the engine's KV events %d to %d (past its replay): forgetting its "
                "blocks; they come back as requests reuse them",
                self._next,
                upto - 1,
            )
            self.blocks.lost()
            self.lost += 1
            self._next = upto

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            self._context.destroy(linger=0)
        self.sockets.remove()
