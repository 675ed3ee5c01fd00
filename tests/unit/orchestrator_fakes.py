"""Fake pools for the orchestrator's unit tests: prefill and decode that hand KV over,
fail, stall or die when told to."""

import asyncio

from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind, TransferFailure
from app.kv.fallback import Transport
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult, Started, TokenChunk

NX, OS, RC = Transport.NIXL, Transport.OBJECT_STORE, Transport.RECOMPUTE
CHAIN = (NX, OS, RC)


class FakePrefill(PoolClient):
    """Hands KV over by any transport, or fails / stalls when told to."""

    def __init__(self, raises=False, stall_s=0.0, queue_s=0.0):
        self.calls: list[tuple[str, Transport]] = []
        self.released: list[PrefillResult] = []
        self.raises = raises
        self.stall_s = stall_s
        self.queue_s = queue_s

    async def prefill(self, request, transport=NX):
        self.calls.append((request.request_id, transport))
        await asyncio.sleep(self.queue_s)
        yield Started("p-1")
        await asyncio.sleep(self.stall_s)
        if self.raises:
            raise RuntimeError("prefill replica died")
        if transport is NX:
            yield PrefillResult({"remote_block_ids": [[7]]}, 3)
        else:
            yield PrefillResult(None, 3, kv_object="ref-1", publish_s=0.002)

    async def generate(self, request):
        raise AssertionError("prefill pool never generates")
        yield

    async def release(self, result):
        self.released.append(result)


class FakeDecode(PoolClient):
    """Streams two chunks; refuses the KV of the transports listed in ``broken``.

    NIXL's read is reported on the last chunk, the object store's on the first, as the
    engine replica does; ``queue_s`` is time in Serve's queue, before ``Started``.
    """

    def __init__(self, broken=(), queue_s=0.0, dies=False):
        self.broken = set(broken)
        self.queue_s = queue_s
        self.dies = dies
        self.generated: list[GenerateRequest] = []
        self.closed = 0

    async def prefill(self, request, transport=NX):
        raise AssertionError("decode pool never prefills")
        yield

    async def generate(self, request):
        self.generated.append(request)
        try:
            await asyncio.sleep(self.queue_s)
            if self.dies:
                raise RuntimeError("decode replica died")
            yield Started("d-1")
            transport = (
                NX if request.kv_transfer_params else OS if request.kv_object is not None else RC
            )
            if transport in self.broken:
                failure = TransferFailure(FailureKind.KV_LOAD, f"{transport} broken")
                yield TokenChunk("", [], transfer_failed=failure)
                return
            yield TokenChunk(
                "a",
                [1],
                kv_bytes=100 if transport is OS else 0,
                kv_fetch_s=0.003 if transport is OS else 0.0,
            )
            yield TokenChunk(
                "b",
                [2],
                finish_reason="length",
                kv_bytes=64 if transport is NX else 0,
                kv_fetch_s=0.004 if transport is NX else 0.0,
            )
        finally:
            self.closed += 1


def one_request():
    return GenerateRequest("r1", [1, 2, 3], sampling_params=None)


async def run_request(orchestrator):
    timings = RequestTimings()
    texts = [c.text async for c in orchestrator.run(one_request(), timings)]
    return texts, timings
