"""The ingress's reader of the engines' prefix caches (``router.prefix_source: kv_events``).

For each live replica of each pool (the routers' ``PrefixIndex.live``) one loop asks what
its engine's prefix cache gained and lost since the last answer (``LLMServer.kv_blocks``,
routed to that replica by the pool's router) and applies the answer to the pool's
:class:`~app.routing.prefix_index.PrefixIndex`, which the same process's routers read.
The replica holds a question with nothing new for up to ``wait_s`` and answers as soon as
its cache changes (a long poll), so the index trails the engine by one call's time under
load and costs one call a second per idle replica; ``min_interval_s`` bounds the rate
under load. A replica that does not answer keeps what was last read of it; one that
answers for another epoch (restarted, or it lost events) is read again in full.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from app.config import AppConfig
from app.pool.records import BlocksQuery
from app.routing import prefix_index
from app.routing.prefix_index import PrefixIndex

logger = logging.getLogger("splitserve.prefix_index")

WAIT_S = 1.0  # a replica holds a question with nothing new this long
MIN_INTERVAL_S = 0.05  # between two questions to one replica
TIMEOUT_S = 5.0  # beyond the wait
RECONCILE_S = 0.5  # how often the set of replicas read follows the routers'
_FAILED: Any = object()


class PrefixIndexReader:
    """Keeps the pools' indexes (pool -> index) filled from their replicas (pool -> handle)."""

    def __init__(
        self,
        handles: dict[str, Any],
        indexes: dict[str, PrefixIndex],
        wait_s: float = WAIT_S,
        min_interval_s: float = MIN_INTERVAL_S,
    ) -> None:
        self.handles = handles
        self.indexes = indexes
        self.wait_s = wait_s
        self.min_interval_s = min_interval_s
        self.reads = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None
        self._loops: dict[tuple[str, str], asyncio.Task[None]] = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="prefix-index")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                live = {(pool, r) for pool, index in self.indexes.items() for r in index.live()}
                for key in [k for k in self._loops if k not in live or self._loops[k].done()]:
                    self._loops.pop(key).cancel()
                for pool, replica in live - set(self._loops):
                    self._loops[(pool, replica)] = loop.create_task(self._follow(pool, replica))
                await asyncio.sleep(RECONCILE_S)
        finally:
            for task in self._loops.values():
                task.cancel()

    async def _follow(self, pool: str, replica: str) -> None:
        while True:
            await self._read(pool, replica)
            await asyncio.sleep(self.min_interval_s)

    async def _read(self, pool: str, replica: str) -> None:
        index = self.indexes[pool]
        epoch, since = index.since(replica)
        index.polling(replica, +1)  # counted in its queue length by Serve: the routers
        try:  # take it out
            async with asyncio.timeout(self.wait_s + TIMEOUT_S):
                changes = await self.handles[pool].kv_blocks.remote(
                    BlocksQuery(replica, epoch, since, self.wait_s)
                )
        except Exception as exc:  # a replica starting, stopping or dead: read it next time
            self.failures += 1
            if self.failures in (1, 10, 100) or self.failures % 1000 == 0:
                logger.warning("could not read %s replica %s's cache: %r", pool, replica, exc)
            changes = _FAILED
        finally:
            index.polling(replica, -1)
        if changes is _FAILED:
            await asyncio.sleep(self.wait_s)
            return
        if changes is not None:
            index.update(replica, changes)
            self.reads += 1

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


def indexed_pools(config: AppConfig, pools: Iterable[str]) -> dict[str, PrefixIndex]:
    """The pools (of ``pools``) whose router matches prompts against an index of their
    engines' KV events, each with this process's index of it."""
    if config.router.prefix_source != "kv_events":
        return {}
    router = config.router
    found = {}
    for pool in pools:
        by_prefix = pool in ("prefill", "colocated") and router.prefill_policy == "prefix_affinity"
        if by_prefix or (pool == "decode" and router.decode_policy == "kv_capacity"):
            found[pool] = prefix_index.shared(pool)
    return found
