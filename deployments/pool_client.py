"""A :class:`PoolClient` that reaches an engine pool through a Ray Serve handle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.kv_transport.fallback import Transport
from app.orchestrator import PoolClient
from app.records import GenerateRequest, PrefillResult, TokenChunk


class ServePoolClient(PoolClient):
    """Calls `LLMServer` replicas; Serve's router picks the replica.

    With ``grpc``, calls go by value over Serve's gRPC channel, except those whose
    request or result holds a Ray object reference (object-store KV): those stay Ray
    actor calls, so Ray keeps the referenced KV alive while it is in flight.
    """

    def __init__(self, handle: Any, grpc: bool = False) -> None:
        self.handle = handle
        self._stream_handle = handle.options(stream=True)
        self._fast = handle.options(_by_reference=False) if grpc else handle
        self._fast_stream = self._fast.options(stream=True)

    async def prefill(self, request: GenerateRequest, transport: Transport) -> PrefillResult:
        handle = self.handle if transport is Transport.OBJECT_STORE else self._fast
        response = handle.prefill.remote(request, transport)
        try:
            result: PrefillResult = await response
        except BaseException:
            response.cancel()
            raise
        return result

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenChunk]:
        handle = self._stream_handle if request.kv_object is not None else self._fast_stream
        stream = handle.generate.remote(request)
        finished = False
        try:
            async for chunk in stream:
                yield chunk
            finished = True
        finally:
            if not finished:
                # Cancelling the call aborts the request inside the replica's engine.
                stream.cancel()
