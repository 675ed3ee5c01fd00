"""One prefill call, as the orchestrator makes it: the wait for a replica and the prefill
each within their timeout, and how a failure of it is named."""

from __future__ import annotations

import asyncio
import time

from app.config import TransportConfig
from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind, TransferFailure, describe_failure
from app.kv.fallback import Transport
from app.pool.client import PoolBusy, PoolClient
from app.pool.records import GenerateRequest, PrefillResult, Started

# A prefill pool that is busy or slow would be as busy or slow for the next transport.
POOL_UNAVAILABLE = (
    FailureKind.PREFILL_BUSY,
    FailureKind.PREFILL_QUEUE_TIMEOUT,
    FailureKind.PREFILL_TIMEOUT,
)


class PrefillTimeout(Exception):
    """A prefill timeout, with its kind."""

    def __init__(self, kind: FailureKind, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.kind = kind


async def prefill_once(
    pool: PoolClient,
    request: GenerateRequest,
    transport: Transport,
    timeouts: TransportConfig,
    timings: RequestTimings,
) -> PrefillResult:
    """One prefill: the wait for a replica and its run each within their timeout."""
    queued = time.perf_counter()
    stream = None
    try:
        stream = pool.prefill(request, transport)
        try:
            async with asyncio.timeout(timeouts.prefill_queue_timeout_s):
                started = await anext(aiter(stream))
        except TimeoutError as exc:
            raise PrefillTimeout(
                FailureKind.PREFILL_QUEUE_TIMEOUT, timeouts.prefill_queue_timeout_s
            ) from exc
        assert isinstance(started, Started)
        timings.prefill_queue_s += time.perf_counter() - queued
        running = time.perf_counter()
        try:
            async with asyncio.timeout(timeouts.prefill_timeout_s):
                result = await anext(aiter(stream))
                timings.prefill_s += time.perf_counter() - running
                # Let the call end on its own (stopping it early would cancel it).
                async for _ in stream:
                    pass
        except TimeoutError as exc:
            raise PrefillTimeout(FailureKind.PREFILL_TIMEOUT, timeouts.prefill_timeout_s) from exc
        assert isinstance(result, PrefillResult)
        timings.prefill_engine = started.engine_id
        timings.prefill_cached_tokens = result.num_cached_tokens
        return result
    finally:
        if stream is not None:
            await stream.aclose()  # type: ignore[attr-defined]


def prefill_failure(exc: Exception) -> TransferFailure:
    if isinstance(exc, PrefillTimeout):
        return TransferFailure(exc.kind, str(exc))
    if isinstance(exc, PoolBusy):
        return TransferFailure(FailureKind.PREFILL_BUSY, str(exc))
    return TransferFailure(FailureKind.PREFILL_ERROR, describe_failure(exc))
