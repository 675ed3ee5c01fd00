"""Orchestration of one request across the pools: prefill remotely, then decode and stream.

The ingress drives both steps (DESIGN.md, "Request flow"): it asks the prefill pool to
compute the prompt's KV, then hands the returned ``kv_transfer_params`` to the decode
pool, which pulls the KV and streams tokens back. In colocated mode the decode pool
serves the whole request. Pools are reached through :class:`PoolClient`, so this logic
runs the same against Ray Serve handles and against test fakes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from app.config import Mode
from app.records import GenerateRequest, PrefillResult, TokenChunk


class PoolClient(ABC):
    """How the orchestrator reaches one pool of engine replicas.

    Contracts:
    - ``prefill``: runs the prompt on one replica and returns where its KV is held. The
      replica holds those KV blocks until a decode replica pulls them, the request is
      aborted, or the transfer lease expires. Raises on failure.
    - ``generate``: streams the request's tokens from one replica. Closing the iterator
      early (the caller stops, is cancelled or times out) must abort the request on
      that replica and free its KV blocks.
    """

    @abstractmethod
    async def prefill(self, request: GenerateRequest) -> PrefillResult: ...

    @abstractmethod
    def generate(self, request: GenerateRequest) -> AsyncIterator[TokenChunk]: ...


@dataclass
class RequestTimings:
    """Where one request's time went, in seconds (filled in as it runs)."""

    prefill_s: float = 0.0
    first_token_s: float = 0.0
    total_s: float = 0.0


class Orchestrator:
    """Runs requests in ``mode`` over a prefill pool (disaggregated only) and a decode pool."""

    def __init__(self, mode: Mode, decode: PoolClient, prefill: PoolClient | None = None) -> None:
        if mode is Mode.DISAGGREGATED and prefill is None:
            raise ValueError("disaggregated mode needs a prefill pool")
        self.mode = mode
        self.decode = decode
        self.prefill = prefill

    async def run(
        self, request: GenerateRequest, timings: RequestTimings | None = None
    ) -> AsyncIterator[TokenChunk]:
        """Stream ``request``'s tokens; prefill first when disaggregated."""
        timings = timings or RequestTimings()
        started = time.perf_counter()
        if self.mode is Mode.DISAGGREGATED:
            assert self.prefill is not None
            result = await self.prefill.prefill(request)
            timings.prefill_s = time.perf_counter() - started
            request = replace(request, kv_transfer_params=result.kv_transfer_params)
        first = True
        async for chunk in self.decode.generate(request):
            if first:
                first = False
                timings.first_token_s = time.perf_counter() - started
            yield chunk
        timings.total_s = time.perf_counter() - started
