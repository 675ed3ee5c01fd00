"""How the orchestrator reaches a pool: the :class:`PoolClient` contract.

Ray Serve handles implement it in :mod:`deployments.pool_client`; unit tests use fakes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from app.kv.fallback import Transport
from app.pool.records import GenerateRequest, PrefillResult, Started, TokenChunk


class PoolBusy(Exception):
    """A pool's queue is full (Serve's ``max_queued_requests``): try later or elsewhere."""


class PoolClient(ABC):
    """How the orchestrator reaches one pool of engine replicas.

    Contracts:
    - Both calls first yield :class:`Started` when a replica hands the request to its
      engine (what came before was Serve's queue), then their results.
    - ``prefill``: runs the prompt on one replica and hands its KV over by ``transport``,
      then yields one :class:`PrefillResult` (NIXL: the replica holds the blocks until a
      decode replica pulls them, the request is aborted, or the lease expires; object
      store: the result references a Ray object freed when the last reference is
      dropped). Raises on failure.
    - ``generate``: streams the request's tokens from one replica. If the request's
      transferred KV cannot be used, the first chunk after ``Started`` has
      ``transfer_failed`` set and no tokens. Closing either iterator early (the caller
      stops, is cancelled or times out) must abort the request on that replica and free
      its KV blocks.
    - Either raises :class:`PoolBusy` when the pool's queue is full, and
      :class:`~app.flow.migration.ReplicaLost` when the replica serving the call, or its
      engine, died (the request can go on elsewhere; any other error is the request's).
    - ``release``: frees at once the NIXL blocks a prefill ``result`` holds on its
      replica; called only once the decode attempt meant to read them has ended without
      using them. Best effort, never raises: the lease frees them anyway. The default
      does nothing.
    """

    async def release(self, result: PrefillResult) -> None:
        return None

    @abstractmethod
    def prefill(
        self, request: GenerateRequest, transport: Transport
    ) -> AsyncIterator[Started | PrefillResult]: ...

    @abstractmethod
    def generate(self, request: GenerateRequest) -> AsyncIterator[Started | TokenChunk]: ...
