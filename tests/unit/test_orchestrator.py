import asyncio
import time
from types import SimpleNamespace

import pytest

from app.config import MigrationConfig, Mode, TransportConfig
from app.flow.kv_lease import kv_expiry
from app.flow.migration import LostCause, ReplicaLost
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind, TransferFailure
from app.pool.records import GenerateRequest, Started
from tests.unit.orchestrator_fakes import (
    CHAIN,
    NX,
    OS,
    RC,
    FakeDecode,
    FakePrefill,
    one_request,
    run_request,
)


async def test_happy_path_uses_nixl_once():
    prefill, decode = FakePrefill(), FakeDecode()
    texts, timings = await run_request(
        Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN)
    )
    assert texts == ["a", "b"]
    assert prefill.calls == [("r1", NX)]  # no object-store save on the happy path
    assert decode.generated[0].kv_transfer_params == {"remote_block_ids": [[7]]}
    # The blocks' lease (30 s by default) less vLLM's heartbeat interval (30 // 6 s) and
    # a 2 s slack: a later decode start must not read.
    expires_at = decode.generated[0].kv_expires_at
    assert expires_at is not None
    expires_in = expires_at - time.time()
    assert 22 < expires_in <= 23
    assert timings.transfer.transport is NX and not timings.transfer.fallbacks
    # NIXL's read, as the decode engine's connector reported it on the last chunk
    assert timings.transfer.kv_bytes == 64 and timings.kv_fetch_s == 0.004
    assert timings.transfer.transfer_s == 0.004
    assert timings.prefill_engine == "p-1" and timings.decode_engine == "d-1"
    assert 0 <= timings.prefill_s <= timings.first_token_s <= timings.total_s
    await asyncio.sleep(0)
    assert prefill.released == []  # decode read the blocks: prefill frees them itself


async def test_nixl_failure_falls_back_to_the_object_store():
    prefill, decode = FakePrefill(), FakeDecode(broken={NX})
    reports: list[object] = []
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, on_transfer=reports.append
    )
    texts, timings = await run_request(orchestrator)
    assert texts == ["a", "b"]
    assert [t for _, t in prefill.calls] == [NX, OS]
    assert [r.request_id for r in decode.generated] == ["r1", "r1.1"]
    assert decode.generated[1].kv_object == "ref-1"
    assert timings.transfer.transport is OS
    assert [(a.transport, a.failure) for a in timings.transfer.fallbacks] == [
        (NX, TransferFailure(FailureKind.KV_LOAD, "nixl broken"))
    ]
    assert timings.transfer.kv_bytes == 100 and timings.kv_fetch_s == 0.003
    assert timings.transfer.transfer_s == pytest.approx(0.005)  # publish + fetch
    assert reports == [timings.transfer]
    assert decode.closed == 2  # the failed attempt's stream was closed
    await asyncio.sleep(0)
    # The failed attempt's NIXL blocks are freed on prefill at once, not at its lease.
    assert [r.kv_transfer_params for r in prefill.released] == [{"remote_block_ids": [[7]]}]


async def test_both_transports_failing_recomputes():
    prefill, decode = FakePrefill(), FakeDecode(broken={NX, OS})
    texts, timings = await run_request(
        Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN)
    )
    assert texts == ["a", "b"]
    last = decode.generated[-1]
    assert last.kv_transfer_params is None and last.kv_object is None
    assert timings.transfer.transport is RC
    assert [a.transport for a in timings.transfer.fallbacks] == [NX, OS]


async def test_a_failing_prefill_tries_the_next_transport_then_recomputes():
    # The replica may be alive with NIXL broken: the object store is worth a try.
    prefill, decode = FakePrefill(raises=True), FakeDecode()
    texts, timings = await run_request(
        Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN)
    )
    assert texts == ["a", "b"]
    assert [t for _, t in prefill.calls] == [NX, OS]
    assert timings.transfer.transport is RC
    failure = timings.transfer.fallbacks[0].failure
    assert failure is not None and failure.kind is FailureKind.PREFILL_ERROR
    assert "prefill replica died" in failure.message


def _timeouts(**fields):
    return TransportConfig(**{"prefill_queue_timeout_s": 5, "prefill_timeout_s": 5, **fields})


async def test_stalled_prefill_times_out_into_recompute():
    prefill, decode = FakePrefill(stall_s=5), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, timeouts=_timeouts(prefill_timeout_s=0.05)
    )
    texts, timings = await asyncio.wait_for(run_request(orchestrator), 2)
    assert texts == ["a", "b"] and timings.transfer.transport is RC
    assert [a.failure.kind for a in timings.transfer.fallbacks] == [FailureKind.PREFILL_TIMEOUT]
    assert len(prefill.calls) == 1  # a slow pool would be as slow for the object store


async def test_prefill_queueing_counts_against_the_queue_timeout_not_the_prefill():
    # 0.2 s in Serve's queue, then a quick prefill: within a 0.1 s prefill timeout.
    prefill, decode = FakePrefill(queue_s=0.2), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, timeouts=_timeouts(prefill_timeout_s=0.1)
    )
    texts, timings = await run_request(orchestrator)
    assert texts == ["a", "b"] and timings.transfer.transport is NX
    assert timings.prefill_queue_s >= 0.2 > timings.prefill_s


async def test_no_prefill_replica_in_time_is_a_queue_timeout():
    prefill, decode = FakePrefill(queue_s=5), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        decode,
        prefill,
        plan=CHAIN,
        timeouts=_timeouts(prefill_queue_timeout_s=0.05),
    )
    texts, timings = await asyncio.wait_for(run_request(orchestrator), 2)
    assert texts == ["a", "b"] and timings.transfer.transport is RC
    assert [a.failure.kind for a in timings.transfer.fallbacks] == [
        FailureKind.PREFILL_QUEUE_TIMEOUT
    ]


class HangingDecode(FakeDecode):
    """A transfer that never completes: no first chunk while KV is to be loaded."""

    async def generate(self, request):
        if request.kv_transfer_params or request.kv_object is not None:
            yield Started("d-1")
            await asyncio.sleep(60)
        async for chunk in super().generate(request):
            yield chunk


async def test_hung_transfer_times_out_into_the_next_transport():
    prefill = FakePrefill()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        HangingDecode(),
        prefill,
        plan=CHAIN,
        timeouts=_timeouts(transfer_timeout_s=0.05),
    )
    texts, timings = await asyncio.wait_for(run_request(orchestrator), 5)
    assert texts == ["a", "b"] and timings.transfer.transport is RC
    kinds = [a.failure.kind for a in timings.transfer.fallbacks]
    assert kinds == [FailureKind.TRANSFER_TIMEOUT, FailureKind.TRANSFER_TIMEOUT]
    await asyncio.sleep(0)
    # The read timed out: it may still be in flight, so prefill is not told to free the
    # blocks now (decode's abort tells it, or the lease frees them).
    assert prefill.released == []


async def test_a_client_leaving_while_decode_reads_does_not_free_the_blocks_under_it():
    # Closing the decode stream only asks Serve to cancel; the engine may still be reading.
    # vLLM's connector tells prefill once decode's abort lands; until then, no release.
    prefill = FakePrefill()
    orchestrator = Orchestrator(Mode.DISAGGREGATED, HangingDecode(), prefill, plan=CHAIN)
    task = asyncio.ensure_future(run_request(orchestrator))
    await asyncio.sleep(0.1)  # decode is reading the KV (forever)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert prefill.released == []


async def test_kv_that_decode_refused_is_freed_at_once():
    prefill = FakePrefill()
    orchestrator = Orchestrator(Mode.DISAGGREGATED, FakeDecode(broken={NX}), prefill, plan=CHAIN)
    texts, timings = await run_request(orchestrator)
    assert texts == ["a", "b"] and timings.transfer.transport is OS
    await asyncio.sleep(0)
    assert [r.kv_transfer_params for r in prefill.released] == [{"remote_block_ids": [[7]]}]


class LosingDecode(FakeDecode):
    """The decode replica dies after taking the request, ``losses`` times; then serves."""

    def __init__(self, losses):
        super().__init__()
        self.losses = losses

    async def generate(self, request):
        self.generated.append(request)
        if self.losses:
            self.losses -= 1
            yield Started("d-dead")
            raise ReplicaLost(LostCause.REPLICA_DIED, "actor died")
        async for chunk in FakeDecode.generate(self, request):
            yield chunk


async def test_a_request_retried_past_lost_decode_replicas_is_counted_once_and_served():
    reports: list[object] = []
    prefill = FakePrefill()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        LosingDecode(losses=3),
        prefill,
        plan=CHAIN,
        on_transfer=reports.append,
        migration=MigrationConfig(retry_interval_s=0.01),
    )
    timings = RequestTimings()
    request = GenerateRequest("r1", [1, 2, 3], sampling_params=SimpleNamespace(max_tokens=8))
    texts = [c.text async for c in orchestrator.run(request, timings)]
    assert texts == ["a", "b"]
    # One report for the request: served over NIXL, not unserved, no decode_error.
    assert len(reports) == 1 and reports[0] is timings.transfer
    assert timings.transfer.transport is NX and not timings.transfer.unserved
    assert timings.transfer.fallbacks == []


async def test_a_busy_decode_queue_is_not_a_failed_transfer():
    # 0.2 s in the decode pool's queue with a 0.05 s transfer timeout: one prefill, NIXL.
    prefill, decode = FakePrefill(), FakeDecode(queue_s=0.2)
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, timeouts=_timeouts(transfer_timeout_s=0.05)
    )
    texts, timings = await run_request(orchestrator)
    assert texts == ["a", "b"] and timings.transfer.transport is NX
    assert len(prefill.calls) == 1 and not timings.transfer.fallbacks
    assert timings.decode_queue_s >= 0.2


async def test_a_local_request_times_its_decode_queue_and_first_step():
    orchestrator = Orchestrator(Mode.COLOCATED, FakeDecode(queue_s=0.1))
    texts, timings = await run_request(orchestrator)
    assert texts == ["a", "b"] and timings.decode_engine == "d-1"
    assert timings.decode_queue_s >= 0.1
    assert 0 < timings.decode_first_token_s < timings.decode_queue_s


async def test_a_dead_decode_pool_fails_the_request_and_is_counted():
    reports: list[object] = []
    prefill = FakePrefill()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        FakeDecode(dies=True),
        prefill,
        plan=CHAIN,
        on_transfer=reports.append,
    )
    timings = RequestTimings()
    with pytest.raises(RuntimeError, match="decode replica died"):
        [c async for c in orchestrator.run(one_request(), timings)]
    await asyncio.sleep(0)
    assert len(prefill.released) == 1  # nobody will read the blocks
    assert reports == [timings.transfer] and timings.transfer.unserved
    assert [a.failure and a.failure.kind for a in timings.transfer.attempts] == [
        FailureKind.DECODE_ERROR
    ]


async def test_a_failing_metrics_callback_does_not_fail_the_request():
    def explode(report):
        raise ValueError("metrics down")

    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, FakeDecode(), FakePrefill(), plan=CHAIN, on_transfer=explode
    )
    texts, _ = await run_request(orchestrator)
    assert texts == ["a", "b"]


def test_the_kv_lease_margin_covers_vllms_first_heartbeat():
    # vLLM 0.32 renews a prefill's lease every kv_lease_s // 6 s, on one global timer: a
    # request added just after a heartbeat waits up to that long for its first. A decode
    # that starts the request must have more than that left, or the blocks can be freed
    # and reused under its read.
    for lease in (8, 30, 120):
        left = kv_expiry(lease) - time.time()
        heartbeat = lease // 6
        assert lease - left >= heartbeat + 1.0, (lease, left)
        assert left > 0


async def test_each_token_gap_is_reported_as_it_is_streamed():
    gaps: list[tuple[float, bool]] = []
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        FakeDecode(),
        FakePrefill(),
        plan=CHAIN,
        on_token_gap=lambda seconds, remote: gaps.append((seconds, remote)),
    )
    timings = RequestTimings()
    stream = orchestrator.run(one_request(), timings)
    assert (await anext(stream)).text == "a"
    assert gaps == []  # one chunk: no gap yet
    assert (await anext(stream)).text == "b"
    assert len(gaps) == 1 and gaps[0][1] is True  # before the stream ends, remote path
    assert [c async for c in stream] == []
    assert [g for g, _ in gaps] == timings.token_gaps_s


async def test_a_failing_token_gap_metric_does_not_fail_the_stream():
    def broken(seconds, remote):
        raise RuntimeError("metrics agent gone")

    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, FakeDecode(), FakePrefill(), plan=CHAIN, on_token_gap=broken
    )
    texts, _ = await run_request(orchestrator)
    assert texts == ["a", "b"]
