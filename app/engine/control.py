"""What a replica asks of its engine beyond requests: KV leases, scheduling, the cache.

Each call goes to the engine through ``collective_rpc`` (to splitserve's worker
extensions, :mod:`app.kv.lease_release`) or vLLM's own engine-client calls; the replica's
stopping, tests and fault injection use them. Mixed into
:class:`app.engine.server.EngineServer`, whose ``engine`` they address.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.kv import lease_release
from app.kv.lease_release import Release

logger = logging.getLogger("splitserve.engine")

_RELEASE_TRIES = 20  # x 50 ms


class EngineControl:
    """Engine calls that are not requests (``self.engine``: vLLM's ``AsyncLLM``)."""

    engine: Any

    async def release_kv(self, kv_transfer_params: dict[str, Any]) -> Release:
        """Free at once the NIXL blocks a prefill kept for a decode attempt that has ended
        without reading them (:mod:`app.kv.lease_release`)."""
        request_id = str(kv_transfer_params.get("remote_request_id") or "")
        outcome = Release.UNKNOWN
        # Just after the prefill the worker may not have its lease yet (it learns it at
        # the engine's next step): ask again for a moment.
        for _ in range(_RELEASE_TRIES):
            answers = await self.engine.collective_rpc(lease_release.METHOD, args=([request_id],))
            outcome = Release(answers[0].get(request_id, Release.UNKNOWN))
            if outcome is not Release.PENDING:
                break
            await asyncio.sleep(0.05)
        logger.debug("release of %s's KV blocks: %s", request_id, outcome.value)
        return outcome

    async def drain_leases(self, limit_s: float) -> tuple[int, int]:
        """Wait, at most ``limit_s``, until this prefill engine keeps no NIXL blocks for a
        decode to pull: each is read or its lease expires (a stopping replica's last act
        before its engine shuts down). (Held at the start, held at the end.)"""
        deadline = time.monotonic() + limit_s
        held = first = await self._held_leases()
        while held and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            held = await self._held_leases()
        return first, held

    async def _held_leases(self) -> int:
        try:
            answers = await self.engine.collective_rpc(lease_release.HELD)
        except Exception:  # no extension (no NIXL), or the engine is gone: nothing to wait for
            return 0
        return int(answers[0])

    async def hold_scheduling(self, seconds: float) -> None:
        """Stop the engine scheduling any step for ``seconds``, then resume; requests wait,
        none is lost. A stalled engine as fault tests need it (a read that starts late)."""
        await self.engine.pause_generation(mode="keep", clear_cache=False)
        try:
            await asyncio.sleep(seconds)
        finally:
            await self.engine.resume_generation()

    async def all_blocks_free(self) -> bool:
        """True when the engine holds no KV block for any request.

        Asks vLLM to reset its prefix cache, which it refuses while any block is in use
        (running requests, or blocks kept for a remote decode to pull). Side effect: the
        prefix cache is emptied, so call it from tests and diagnostics, not per request.
        """
        return bool(await self.engine.reset_prefix_cache())
