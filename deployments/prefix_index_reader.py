"""The ingress's reader of the engines' prefix caches (``router.prefix_source: kv_events``).

Every ``interval_s`` it asks each live replica of each pool what its engine's prefix
cache gained and lost since the last answer (``LLMServer.kv_blocks``, routed to that
replica by the pool's router), and applies the answer to the pool's
:class:`~app.routing.prefix_index.PrefixIndex`, which the same process's routers read.
The live replicas are the routers' (``PrefixIndex.live``). A replica that does not answer
in time keeps what was last read of it; one that answers for another epoch (restarted, or
it lost events) is read again in full.
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

INTERVAL_S = 0.25
TIMEOUT_S = 2.0


class PrefixIndexReader:
    """Keeps the pools' indexes (pool -> index) filled from their replicas (pool -> handle)."""

    def __init__(
        self,
        handles: dict[str, Any],
        indexes: dict[str, PrefixIndex],
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.handles = handles
        self.indexes = indexes
        self.interval_s = interval_s
        self.reads = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="prefix-index")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            reads = [
                self._read(pool, replica)
                for pool, index in self.indexes.items()
                for replica in index.live()
            ]
            await asyncio.gather(*reads)

    async def _read(self, pool: str, replica: str) -> None:
        index = self.indexes[pool]
        epoch, since = index.since(replica)
        try:
            async with asyncio.timeout(TIMEOUT_S):
                changes = await self.handles[pool].kv_blocks.remote(
                    BlocksQuery(replica, epoch, since)
                )
        except Exception as exc:  # a replica starting, stopping or dead: read it next time
            self.failures += 1
            if self.failures in (1, 10, 100) or self.failures % 1000 == 0:
                logger.warning("could not read %s replica %s's cache: %r", pool, replica, exc)
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
