"""One decode attempt with transferred KV, as the orchestrator sees it: its first chunk
within the transfer's timeout, what is known of it, and the KV's figures it reports; and
a request served on the decode pool alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind, TransferFailure
from app.kv.fallback import Transport
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, Started, TokenChunk


@dataclass
class DecodeAttempt:
    """What is known of one decode attempt with transferred KV."""

    started: bool = False  # the decode replica took the request (it may read)
    used: bool = False  # decode served the request with the KV
    ended: bool = False  # decode reported the attempt over: no read in flight


async def first_chunk(
    stream: AsyncIterator[Started | TokenChunk],
    transport: Transport,
    transfer_timeout_s: float,
    timings: RequestTimings,
    attempt: DecodeAttempt,
) -> TokenChunk | None:
    """The decode stream's first chunk of tokens (None: the stream ended empty).

    The wait for the decode replica has no limit here (the request's deadline bounds
    it); the transfer's does, from when the replica started the request: a transfer
    that hangs fails the attempt.
    """
    queued = time.perf_counter()
    item = await anext(aiter(stream), None)
    if isinstance(item, Started):
        attempt.started = True
        timings.decode_queue_s += time.perf_counter() - queued
        timings.decode_engine = item.engine_id
        started = time.perf_counter()
        limit = None if transport is Transport.RECOMPUTE else transfer_timeout_s
        try:
            async with asyncio.timeout(limit):
                item = await anext(aiter(stream), None)
        except TimeoutError:
            return TokenChunk(
                "",
                [],
                transfer_failed=TransferFailure(
                    FailureKind.TRANSFER_TIMEOUT,
                    f"no first token {limit:g} s after the decode replica started",
                ),
            )
        timings.decode_first_token_s = time.perf_counter() - started
    assert item is None or isinstance(item, TokenChunk)
    return item


def note_kv(chunk: TokenChunk, timings: RequestTimings, publish_s: float) -> None:
    """Take the KV's size and fetch time from the chunk that reports them."""
    if chunk.kv_fetch_s or chunk.kv_bytes:
        timings.kv_fetch_s = chunk.kv_fetch_s or timings.kv_fetch_s
        timings.transfer.kv_bytes = chunk.kv_bytes or timings.transfer.kv_bytes
        timings.transfer.transfer_s = publish_s + timings.kv_fetch_s


async def decode_only(
    decode: PoolClient, request: GenerateRequest, timings: RequestTimings
) -> AsyncIterator[TokenChunk]:
    """The whole request on the decode (or colocated) pool: no KV moves."""
    stream = decode.generate(request)
    queued = time.perf_counter()
    started = None
    try:
        async for item in stream:
            if isinstance(item, Started):
                started = time.perf_counter()
                timings.decode_queue_s += started - queued
                timings.decode_engine = item.engine_id
                continue
            if started is not None:
                timings.decode_first_token_s = time.perf_counter() - started
                started = None
            yield item
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
