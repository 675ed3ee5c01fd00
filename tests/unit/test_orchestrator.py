import asyncio

import pytest

from app.config import Mode
from app.kv_transport.fallback import Transport
from app.orchestrator import Orchestrator, PoolClient, RequestTimings
from app.records import GenerateRequest, PrefillResult, TokenChunk

NX, OS, RC = Transport.NIXL, Transport.OBJECT_STORE, Transport.RECOMPUTE
CHAIN = (NX, OS, RC)


class FakePrefill(PoolClient):
    """Hands KV over by any transport, or fails / stalls when told to."""

    def __init__(self, raises=False, stall_s=0.0):
        self.calls: list[tuple[str, Transport]] = []
        self.raises = raises
        self.stall_s = stall_s

    async def prefill(self, request, transport=NX):
        self.calls.append((request.request_id, transport))
        await asyncio.sleep(self.stall_s)
        if self.raises:
            raise RuntimeError("prefill replica died")
        if transport is NX:
            return PrefillResult({"remote_block_ids": [[7]]}, 3, 0.01)
        return PrefillResult(None, 3, 0.01, kv_object="ref-1", kv_bytes=100, publish_s=0.002)

    async def generate(self, request):
        raise AssertionError("prefill pool never generates")
        yield


class FakeDecode(PoolClient):
    """Streams two chunks; refuses the KV of the transports listed in ``broken``."""

    def __init__(self, broken=()):
        self.broken = set(broken)
        self.generated: list[GenerateRequest] = []
        self.closed = 0

    async def prefill(self, request, transport=NX):
        raise AssertionError("decode pool never prefills")

    async def generate(self, request):
        self.generated.append(request)
        try:
            transport = (
                NX if request.kv_transfer_params else OS if request.kv_object is not None else RC
            )
            if transport in self.broken:
                yield TokenChunk("", [], transfer_failed=f"{transport} broken")
                return
            yield TokenChunk("a", [1], kv_bytes=64 if transport is not RC else 0)
            yield TokenChunk("b", [2], finish_reason="length")
        finally:
            self.closed += 1


def _request():
    return GenerateRequest("r1", [1, 2, 3], sampling_params=None)


async def _run(orchestrator):
    timings = RequestTimings()
    texts = [c.text async for c in orchestrator.run(_request(), timings)]
    return texts, timings


async def test_happy_path_uses_nixl_once():
    prefill, decode = FakePrefill(), FakeDecode()
    texts, timings = await _run(Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN))
    assert texts == ["a", "b"]
    assert prefill.calls == [("r1", NX)]  # no object-store save on the happy path
    assert decode.generated[0].kv_transfer_params == {"remote_block_ids": [[7]]}
    assert timings.transfer.transport is NX and not timings.transfer.fallbacks
    assert timings.transfer.kv_bytes == 64
    assert 0 <= timings.prefill_s <= timings.first_token_s <= timings.total_s


async def test_nixl_failure_falls_back_to_the_object_store():
    prefill, decode = FakePrefill(), FakeDecode(broken={NX})
    reports: list[object] = []
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, on_transfer=reports.append
    )
    texts, timings = await _run(orchestrator)
    assert texts == ["a", "b"]
    assert [t for _, t in prefill.calls] == [NX, OS]
    assert [r.request_id for r in decode.generated] == ["r1", "r1.1"]
    assert decode.generated[1].kv_object == "ref-1"
    assert timings.transfer.transport is OS
    assert [(a.transport, a.reason) for a in timings.transfer.fallbacks] == [(NX, "nixl broken")]
    assert reports == [timings.transfer]
    assert decode.closed == 2  # the failed attempt's stream was closed


async def test_both_transports_failing_recomputes():
    prefill, decode = FakePrefill(), FakeDecode(broken={NX, OS})
    texts, timings = await _run(Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN))
    assert texts == ["a", "b"]
    last = decode.generated[-1]
    assert last.kv_transfer_params is None and last.kv_object is None
    assert timings.transfer.transport is RC
    assert [a.transport for a in timings.transfer.fallbacks] == [NX, OS]


async def test_dead_prefill_pool_goes_straight_to_recompute():
    prefill, decode = FakePrefill(raises=True), FakeDecode()
    texts, timings = await _run(Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN))
    assert texts == ["a", "b"]
    assert [t for _, t in prefill.calls] == [NX]  # the object store needs the same pool
    assert timings.transfer.transport is RC
    assert "prefill replica died" in timings.transfer.fallbacks[0].reason


async def test_stalled_prefill_times_out_into_recompute():
    prefill, decode = FakePrefill(stall_s=5), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, prefill_timeout_s=0.05
    )
    texts, timings = await asyncio.wait_for(_run(orchestrator), 2)
    assert texts == ["a", "b"] and timings.transfer.transport is RC


class HangingDecode(FakeDecode):
    """A transfer that never completes: no first chunk while KV is to be loaded."""

    async def generate(self, request):
        if request.kv_transfer_params or request.kv_object is not None:
            await asyncio.sleep(60)
        async for chunk in super().generate(request):
            yield chunk


async def test_hung_transfer_times_out_into_the_next_transport():
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, HangingDecode(), FakePrefill(), plan=CHAIN, transfer_timeout_s=0.05
    )
    texts, timings = await asyncio.wait_for(_run(orchestrator), 5)
    assert texts == ["a", "b"] and timings.transfer.transport is RC
    assert all("no first token" in a.reason for a in timings.transfer.fallbacks)


async def test_short_prompts_are_prefilled_on_decode():
    prefill, decode = FakePrefill(), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, local_prefill_below_tokens=4
    )
    texts, timings = await _run(orchestrator)  # a 3-token prompt
    assert texts == ["a", "b"] and prefill.calls == []
    assert not timings.transfer.remote_prefill
    assert timings.transfer.decision_reason == "short_prompt"


async def test_prefill_backlog_sends_new_requests_to_decode():
    prefill, decode = FakePrefill(stall_s=0.2), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, max_prefill_backlog=1
    )
    (_, slow), (_, fast) = await asyncio.gather(_run(orchestrator), _run(orchestrator))
    assert slow.transfer.decision_reason == "long_prompt"
    assert fast.transfer.decision_reason == "prefill_backlog"
    assert len(prefill.calls) == 1 and orchestrator.prefills_in_flight == 0


async def test_colocated_skips_prefill():
    decode = FakeDecode()
    texts, _ = await _run(Orchestrator(Mode.COLOCATED, decode))
    assert texts == ["a", "b"]
    assert decode.generated[0].kv_transfer_params is None


def test_disaggregated_needs_a_prefill_pool_and_a_recompute_tail():
    with pytest.raises(ValueError, match="prefill pool"):
        Orchestrator(Mode.DISAGGREGATED, FakeDecode())
    with pytest.raises(ValueError, match="end with recompute"):
        Orchestrator(Mode.DISAGGREGATED, FakeDecode(), FakePrefill(), plan=(NX,))
