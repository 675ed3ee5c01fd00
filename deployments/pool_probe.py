"""Whether a pool has a warm replica serving, as Serve and the pool itself say
(the ``probe`` of :class:`app.readiness.Readiness`).

A pool serves when Serve's controller counts one of its replicas RUNNING: a replica is
RUNNING only once its constructor has returned, and the constructor warms the engine and
its pairs (:mod:`app.warmup`). The first time a pool is seen so, it must also answer a
call through the ingress's own handle, so the ingress's router knows the replica before
the first client request is let in.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from deployments.replicas import POOL_NAMES, running_counts


class ServePoolProbe:
    """Probe for the pools of ``application``; ``handles``: pool role -> Serve handle."""

    def __init__(self, application: str, handles: dict[str, Any], max_age_s: float = 0.5):
        self.application = application
        self.handles = handles
        self.max_age_s = max_age_s
        self._counts: dict[str, int] = {}
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    async def __call__(self, pool: str, ever_served: bool) -> bool:
        counts = await self._running()
        if counts.get(POOL_NAMES[pool], 0) == 0:
            return False
        if not ever_served:
            await self.handles[pool].ready.remote()
        return True

    async def _running(self) -> dict[str, int]:
        """RUNNING replicas per deployment of the app: one controller call for all pools."""
        async with self._lock:
            if time.monotonic() - self._read_at > self.max_age_s:
                self._counts = await asyncio.to_thread(running_counts, self.application)
                self._read_at = time.monotonic()
            return self._counts
