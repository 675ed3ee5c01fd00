"""Readiness: the ingress serves only once every pool has a warm replica, as the pools say.

An engine replica is warm when Serve runs it: its constructor warms the engine and its
pairs (:mod:`app.engine.warmup`) before it returns. The ingress itself starts in seconds, long
before that, and Serve's direct ingress and proxy route to it as soon as it is up. So
the ingress asks the pools, and until each has answered:

- ``GET /health`` answers 503 with ``Retry-After`` and says which pools are starting;
- the API routes (``/v1/...``) answer 503 with ``Retry-After`` at once, instead of
  queueing a request behind engines that are still loading.

Once every pool has answered, the app is *ready* for good (it never goes back to
"starting"). Later, a pool with no replica serving (every prefill replica restarting,
say) is *degraded*: ``/health`` names it, and the orchestrator prefills locally on decode
at once rather than waiting for the prefill queue's timeout. ``/health`` stays 200 while
the pool that streams tokens (decode, or colocated) serves; without it, 503.

:class:`Readiness` holds the state and decides; what "a pool answers" means is the
``probe`` the caller gives (:mod:`deployments.pool_probe` asks Serve), so this module
runs without Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

logger = logging.getLogger("splitserve.readiness")

# How often the pools are asked; also the Retry-After of a 503 while they start.
PROBE_INTERVAL_S = 1.0
# A probe that takes longer than this counts as "not serving".
PROBE_TIMEOUT_S = 5.0


class PoolState(StrEnum):
    STARTING = "starting"  # no replica has answered yet
    SERVING = "serving"  # a warm replica answered at the last probe
    DEGRADED = "degraded"  # it served once; at the last probe, no replica did


@dataclass(frozen=True)
class Health:
    """What ``/health`` answers: its status code and body."""

    status: int
    body: dict[str, Any]
    retry_after_s: int | None = None


# probe(pool, ever_served) -> whether a warm replica of ``pool`` serves now.
Probe = Callable[[str, bool], Awaitable[bool]]


class Readiness:
    """Per pool: starting, serving or degraded, from the answers of ``probe``.

    ``streaming_pool`` is the pool whose loss stops every request (decode, or colocated);
    any other pool's loss only degrades the app. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        pools: tuple[str, ...],
        streaming_pool: str,
        probe: Probe,
        interval_s: float = PROBE_INTERVAL_S,
        timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if streaming_pool not in pools:
            raise ValueError(f"the streaming pool {streaming_pool!r} is not one of {pools}")
        self.pools = pools
        self.streaming_pool = streaming_pool
        self.probe = probe
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.states = dict.fromkeys(pools, PoolState.STARTING)
        self.started_at = clock()
        self.ready_at: float | None = None  # when every pool had first answered
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        """Every pool has had a warm replica answer (stays true once true)."""
        return self.ready_at is not None

    def serving(self, pool: str) -> bool:
        return self.states[pool] is PoolState.SERVING

    def update(self, pool: str, serving: bool) -> None:
        """Record one probe's answer for ``pool``."""
        before = self.states[pool]
        if serving:
            after = PoolState.SERVING
        else:
            after = PoolState.STARTING if before is PoolState.STARTING else PoolState.DEGRADED
        self.states[pool] = after
        if after is not before:
            log = logger.warning if after is PoolState.DEGRADED else logger.info
            log("pool %s: %s -> %s", pool, before.value, after.value)
        if self.ready_at is None and all(s is PoolState.SERVING for s in self.states.values()):
            self.ready_at = self.clock()
            logger.info(
                "every pool serves warm: ready %.1f s after the ingress started",
                self.ready_at - self.started_at,
            )

    @property
    def retry_after_s(self) -> int:
        """The ``Retry-After`` of a 503 while a pool is missing: the next probe's time."""
        return max(1, round(self.interval_s))

    def health(self) -> Health:
        pools = {pool: state.value for pool, state in self.states.items()}
        retry = self.retry_after_s
        if not self.ready:
            starting = [p for p, s in self.states.items() if s is PoolState.STARTING]
            detail = f"waiting for a warm replica of {', '.join(starting)}"
            body = {"status": "starting", "detail": detail, "pools": pools}
            return Health(503, body, retry)
        degraded = [p for p, s in self.states.items() if s is not PoolState.SERVING]
        if self.streaming_pool in degraded:
            detail = f"no replica of the {self.streaming_pool} pool serves"
            body = {"status": "unavailable", "detail": detail, "pools": pools}
            return Health(503, body, retry)
        if degraded:
            detail = f"no replica of {', '.join(degraded)} serves: prompts are prefilled on decode"
            body = {"status": "degraded", "detail": detail, "degraded": degraded, "pools": pools}
            return Health(200, body)
        return Health(200, {"status": "ok", "pools": pools})

    def not_ready_error(self) -> str:
        """Why an API request is refused before the app is ready."""
        starting = [p for p, s in self.states.items() if s is PoolState.STARTING]
        waited = self.clock() - self.started_at
        return (
            f"the app is starting: no warm replica of the {', '.join(starting)} pool yet "
            f"({waited:.0f} s since the ingress started); retry later"
        )

    async def probe_once(self) -> None:
        """Ask every pool once, at the same time."""

        async def ask(pool: str) -> None:
            ever = self.states[pool] is not PoolState.STARTING
            try:
                async with asyncio.timeout(self.timeout_s):
                    serving = await self.probe(pool, ever)
            except Exception as exc:  # a probe that fails says "not serving"
                logger.debug("probe of pool %s failed: %r", pool, exc)
                serving = False
            self.update(pool, serving)

        await asyncio.gather(*(ask(pool) for pool in self.pools))

    async def first_look(self, timeout_s: float) -> None:
        """Ask every pool once, for at most ``timeout_s`` (a pool that does not answer in
        time stays as it was)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.probe_once()

    def start(self) -> None:
        """Probe every ``interval_s`` from now on, in this event loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            began = self.clock()
            await self.probe_once()
            # Until ready, ask again at once-ish: a client is waiting on it.
            interval = self.interval_s if self.ready else min(self.interval_s, 0.25)
            await asyncio.sleep(max(0.0, interval - (self.clock() - began)))
