"""Whether a pool has a warm replica serving, as Serve and the pool itself say
(the ``probe`` of :class:`app.api.readiness.Readiness`).

A pool serves when the ingress's own handle to it can route to a replica: Serve's
controller pushes a handle only the replicas it runs, and a replica runs only once its
constructor has returned, after it warmed its engine and its pairs (:mod:`app.engine.warmup`).
The first time a pool is seen so, it must also answer a call through that handle, so the
first client request is routed without waiting.

The handle's replica set is read from its router (Ray 2.60's private
``DeploymentHandle._router._asyncio_router.request_router.curr_replicas``): a memory
read. ``serve.status()`` would say the same through the controller, but it serializes
every deployment's config (cloudpickling each request router class) and took a quarter
of the ingress's CPU at one call a second under a burst; it is the fallback should the
private path change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from deployments.replicas import POOL_NAMES, running_counts

logger = logging.getLogger("ray.serve")


class ServePoolProbe:
    """Probe for the pools of ``application``; ``handles``: pool role -> Serve handle."""

    def __init__(self, application: str, handles: dict[str, Any]) -> None:
        self.application = application
        self.handles = handles
        self._warned = False

    async def __call__(self, pool: str, ever_served: bool) -> bool:
        handle = self.handles[pool]
        if not ever_served:
            # A call through our handle: a warm replica answers, and our router knows it.
            await handle.ready.remote()
        count = routable_replicas(handle)
        if count is None:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "cannot read a Serve handle's replica set (Ray changed?): readiness "
                    "asks Serve's controller instead, at a cost in CPU"
                )
            counts = await asyncio.to_thread(running_counts, self.application)
            count = counts.get(POOL_NAMES[pool], 0)
        return count > 0


def serving_now(handle: Any, fallback: bool) -> bool:
    """Whether ``handle``'s pool has a replica to route to at this moment (the per-request
    check: no probe interval of lag); ``fallback`` when that cannot be read."""
    count = routable_replicas(handle)
    return fallback if count is None else count > 0


def routable_replicas(handle: Any) -> int | None:
    """How many replicas ``handle``'s router routes to now; None if it cannot be read."""
    router = getattr(getattr(handle, "_router", None), "_asyncio_router", None)
    request_router = getattr(router, "request_router", None)
    replicas = getattr(request_router, "curr_replicas", None)
    return None if replicas is None else len(replicas)


class ReplicaLiveness:
    """Whether a replica of ``deployment`` (by unique id) still lives: the decode
    replicas' fence against KV held by a dead prefill replica (:mod:`app.engine.server`).

    Ray's GCS is asked for the replica's actor, whose name goes when it dies (Serve never
    restarts a replica's actor); a draining replica lives. A handle's replica set would
    be a memory read, but Serve's controller updates it only after it noticed the death
    (seen here: a dead replica still routable after Ray knew). An answer that it lives
    is kept for ``ttl_s`` (one GCS call per replica at most that often); one that it is
    dead, for good.
    """

    def __init__(self, application: str, deployment: str, ttl_s: float = 0.5) -> None:
        self.application = application
        self.deployment = deployment
        self.ttl_s = ttl_s
        self._alive_until: dict[str, float] = {}
        self._dead: set[str] = set()
        self._asking: dict[str, asyncio.Future[bool]] = {}  # one GCS call at a time each

    async def __call__(self, unique_id: str) -> bool:
        if unique_id in self._dead:
            return False
        if time.monotonic() < self._alive_until.get(unique_id, 0.0):
            return True
        asking = self._asking.get(unique_id)
        if asking is None:  # requests that arrive together share one call
            asking = asyncio.ensure_future(asyncio.to_thread(self._actor_alive, unique_id))
            self._asking[unique_id] = asking
            asking.add_done_callback(lambda _: self._asking.pop(unique_id, None))
        alive = await asyncio.shield(asking)  # a caller that gives up cancels no one else
        if alive:
            self._alive_until[unique_id] = time.monotonic() + self.ttl_s
        else:
            self._alive_until.pop(unique_id, None)
            if len(self._dead) > 4096:
                self._dead.clear()
            self._dead.add(unique_id)
        return alive

    def _actor_alive(self, unique_id: str) -> bool:
        import ray
        from ray.serve._private.common import DeploymentID, ReplicaID

        replica = ReplicaID(unique_id, DeploymentID(self.deployment, self.application))
        try:
            ray.get_actor(replica.to_full_id_str(), namespace="serve")
        except ValueError:  # no live actor of that name
            return False
        return True
