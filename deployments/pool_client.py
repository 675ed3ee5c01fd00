"""A :class:`PoolClient` that reaches an engine pool through a Ray Serve handle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.kv_transport.fallback import Transport
from app.orchestrator import PoolClient
from app.records import GenerateRequest, PrefillResult, TokenChunk


class ServePoolClient(PoolClient):
    """Calls `LLMServer` replicas; Serve's router picks the replica."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._stream_handle = handle.options(stream=True)

    async def prefill(self, request: GenerateRequest, transport: Transport) -> PrefillResult:
        response = self.handle.prefill.remote(request, transport)
        try:
            result: PrefillResult = await response
        except BaseException:
            response.cancel()
            raise
        return result

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenChunk]:
        stream = self._stream_handle.generate.remote(request)
        finished = False
        try:
            async for chunk in stream:
                yield chunk
            finished = True
        finally:
            if not finished:
                # Cancelling the call aborts the request inside the replica's engine.
                stream.cancel()
