"""The orchestrator's remote-or-local choice per request (fake pools)."""

import asyncio

import pytest

from app.config import Mode
from app.flow.orchestrator import Orchestrator
from app.kv.failure import FailureKind
from app.pool.client import PoolBusy
from tests.unit.orchestrator_fakes import (
    CHAIN,
    NX,
    RC,
    FakeDecode,
    FakePrefill,
    run_request,
)


async def test_short_prompts_are_prefilled_on_decode():
    prefill, decode = FakePrefill(), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, local_prefill_below_tokens=4
    )
    texts, timings = await run_request(orchestrator)  # a 3-token prompt
    assert texts == ["a", "b"] and prefill.calls == []
    assert not timings.transfer.remote_prefill
    assert timings.transfer.decision_reason == "short_prompt"
    # a local prefill is no transport: nothing attempted, nothing moved
    assert timings.transfer.attempts == [] and timings.transfer.transport is None
    assert not timings.transfer.unserved and not timings.disaggregated


async def test_prefill_backlog_sends_new_requests_to_decode():
    prefill, decode = FakePrefill(stall_s=0.2), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, max_prefill_backlog=1
    )
    (_, slow), (_, fast) = await asyncio.gather(
        run_request(orchestrator), run_request(orchestrator)
    )
    assert slow.transfer.decision_reason == "long_prompt"
    assert fast.transfer.decision_reason == "prefill_backlog"
    assert len(prefill.calls) == 1 and orchestrator.prefills_in_flight == 0


async def test_colocated_skips_prefill():
    decode = FakeDecode()
    texts, _ = await run_request(Orchestrator(Mode.COLOCATED, decode))
    assert texts == ["a", "b"]
    assert decode.generated[0].kv_transfer_params is None


def test_disaggregated_needs_a_prefill_pool_and_a_recompute_tail():
    with pytest.raises(ValueError, match="prefill pool"):
        Orchestrator(Mode.DISAGGREGATED, FakeDecode())
    with pytest.raises(ValueError, match="end with recompute"):
        Orchestrator(Mode.DISAGGREGATED, FakeDecode(), FakePrefill(), plan=(NX,))


class BusyPrefill(FakePrefill):
    async def prefill(self, request, transport=NX):
        self.calls.append((request.request_id, transport))
        raise PoolBusy("queue full")
        yield


async def test_a_full_prefill_queue_is_prefilled_on_decode():
    prefill = BusyPrefill()
    texts, timings = await run_request(
        Orchestrator(Mode.DISAGGREGATED, FakeDecode(), prefill, plan=CHAIN)
    )
    assert texts == ["a", "b"] and timings.transfer.transport is RC
    assert len(prefill.calls) == 1
    assert [a.failure and a.failure.kind for a in timings.transfer.fallbacks] == [
        FailureKind.PREFILL_BUSY
    ]


class RaisingAtCallPrefill(FakePrefill):
    """A pool client whose ``prefill`` raises when called, before any stream exists (a
    handle error), as a Serve handle can."""

    def prefill(self, request, transport=NX):  # type: ignore[override]
        self.calls.append((request.request_id, transport))
        raise RuntimeError("handle broken")


async def test_a_prefill_that_raises_at_call_time_leaves_no_prefill_in_flight():
    prefill = RaisingAtCallPrefill()
    orchestrator = Orchestrator(Mode.DISAGGREGATED, FakeDecode(), prefill, plan=CHAIN)
    for _ in range(3):
        texts, timings = await run_request(orchestrator)
        assert texts == ["a", "b"] and timings.transfer.transport is RC
    # Each leak would push later requests toward local prefill for good.
    assert orchestrator.prefills_in_flight == 0


async def test_a_prefill_pool_without_a_replica_sends_prompts_to_decode_at_once():
    prefill = FakePrefill(queue_s=30)  # would wait out the prefill queue's timeout
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, FakeDecode(), prefill, plan=CHAIN, prefill_serving=lambda: False
    )
    texts, timings = await asyncio.wait_for(run_request(orchestrator), 5)
    assert texts == ["a", "b"] and prefill.calls == []
    assert timings.transfer.decision_reason == "prefill_unavailable"
    assert not timings.transfer.remote_prefill
