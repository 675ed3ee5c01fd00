"""Faults end requests cleanly: no hang, a normal answer or a clear error, no KV block held."""

import asyncio
import threading
import time

import httpx
import pytest

from app.config import Mode, TransportConfig
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind
from app.kv.fallback import Transport, transfer_plan
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult
from deployments.pool_client import ServePoolClient
from load_tests.client.sse import sse_data_sync
from tests.integration.conftest import TEST_KV_LEASE_S
from tests.integration.faults import (
    all_blocks_free,
    assert_no_kv_held,
    call,
    decode_chunks,
    handle,
    kill_replica,
    prefill_once,
    wait_actor_gone,
    wait_healthy,
    wait_processes_gone,
    wait_until,
)
from tests.integration.helpers import GREEDY, complete, random_prompt


def _params():
    from vllm import SamplingParams

    return SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def _colocated_text(apps, http, prompt):
    return complete(http, apps.colocated, {**GREEDY, "prompt": prompt})["choices"][0]["text"]


def test_unreachable_nixl_peer_is_reported_not_hung(apps, http):
    """The decode replica answers a transfer it cannot make with a clean failure chunk.

    (The orchestrator then falls back: tests/integration/test_transport_fallback.py.)
    """
    prompt = random_prompt(5101, 260)
    real = prefill_once(GenerateRequest("unreach", prompt, _params()))
    params = dict(real.kv_transfer_params)
    # A peer nobody listens for: a new engine id (no cached handshake) on a closed port.
    params.update(remote_engine_id="prefill-gone", remote_port=1)
    started = time.monotonic()
    chunks = decode_chunks(GenerateRequest("unreach-d", prompt, _params(), params))
    assert len(chunks) == 1 and chunks[0].token_ids == []
    assert chunks[0].transfer_failed.kind is FailureKind.KV_LOAD
    assert time.monotonic() - started < 60
    # The real prefill blocks were never pulled: its lease frees them.
    assert_no_kv_held("Prefill", "Decode", timeout_s=TEST_KV_LEASE_S + 30)


def test_lease_expiry_frees_unpulled_prefill_blocks(apps):
    prompt = random_prompt(5202, 300)
    prefill_once(GenerateRequest("lease", prompt, _params()))
    assert not all_blocks_free("Prefill"), "prefill must hold the KV until pulled or expired"
    started = time.monotonic()
    assert_no_kv_held("Prefill", timeout_s=TEST_KV_LEASE_S + 30)
    assert time.monotonic() - started >= TEST_KV_LEASE_S * 0.5


class StalledDecode(PoolClient):
    """The real decode pool, whose engine stops stepping for ``seconds`` as a request
    carrying NIXL KV arrives: the read starts only after that."""

    def __init__(self, seconds: float):
        self.inner = ServePoolClient(handle("Decode"))
        self.seconds = seconds
        self.hold = None

    def prefill(self, request, transport):
        raise AssertionError("not a prefill pool")

    async def generate(self, request):
        if request.kv_transfer_params is not None and self.hold is None:
            self.hold = handle("Decode").hold_scheduling.remote(self.seconds)
            await asyncio.sleep(0.5)  # the engine is paused before the request reaches it
        async for item in self.inner.generate(request):
            yield item


async def test_a_read_that_would_start_after_prefills_lease_is_refused(apps, http):
    """The heartbeat gap: decode gets the request in time, but its engine reads only after
    prefill's lease ran out (no step, so no heartbeat renewed it), when prefill may have
    reused the blocks. The connector refuses the read (``kv_expired``), the next transport
    serves, and the answer, and a later one sharing the prompt's prefix, equal colocated's."""
    prompt = random_prompt(5404, 300)
    decode = StalledDecode(TEST_KV_LEASE_S + 2)
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        decode,
        ServePoolClient(handle("Prefill")),
        plan=transfer_plan("auto", nixl_available=True),
        timeouts=TransportConfig(kv_lease_s=TEST_KV_LEASE_S, transfer_timeout_s=60),
    )
    timings = RequestTimings()
    request = GenerateRequest("stalled", prompt, _params())
    text = "".join([chunk.text async for chunk in orchestrator.run(request, timings)])
    assert decode.hold is not None, "the decode replica never got the request's KV"
    await asyncio.to_thread(decode.hold.result)
    attempts = [
        (a.transport.value, a.failure and a.failure.kind) for a in timings.transfer.attempts
    ]
    assert attempts == [("nixl", FailureKind.KV_EXPIRED), ("object_store", None)], attempts
    assert text == _colocated_text(apps, http, prompt)
    # Decode cached nothing wrong under the prompt's hash: a request sharing it agrees too.
    longer = prompt + random_prompt(5405, 40)
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": longer})
    assert body["choices"][0]["text"] == _colocated_text(apps, http, longer)
    assert_no_kv_held("Prefill", "Decode", timeout_s=TEST_KV_LEASE_S + 30)


def test_client_disconnects_leave_no_kv_held(apps):
    def open_and_drop(seed: int) -> None:
        body = {**GREEDY, "max_tokens": 400, "prompt": random_prompt(seed, 150), "stream": True}
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", f"{apps.disaggregated}/v1/completions", json=body) as response,
        ):
            assert response.status_code == 200
            for i, _ in enumerate(sse_data_sync(response)):
                if i >= 6:
                    break  # hang up mid-stream

    threads = [threading.Thread(target=open_and_drop, args=(6000 + i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert_no_kv_held("Prefill", "Decode")


class KillAfterPrefill(PoolClient):
    """The real prefill pool, whose replica is SIGKILLed right after it prefilled."""

    def __init__(self):
        self.inner = ServePoolClient(handle("Prefill"))
        self.engine_pids: list[int] = []

    async def prefill(self, request, transport):
        async for item in self.inner.prefill(request, transport):
            if isinstance(item, PrefillResult) and not self.engine_pids:
                self.engine_pids = kill_replica("Prefill")
                # The engine's processes outlive the replica for a moment, and NIXL can
                # still read from them; wait until the KV is really gone, and Ray knows.
                await asyncio.to_thread(wait_processes_gone, self.engine_pids)
                await asyncio.to_thread(wait_actor_gone, "Prefill", item.replica)
            yield item

    def generate(self, request):
        raise AssertionError("not a decode pool")


@pytest.mark.kills_replica
@pytest.mark.parametrize(("kind", "seed"), [("auto", 5303), ("object_store", 5305)])
async def test_prefill_killed_before_decode_pulls(apps, http, kind, seed):
    """Prefill dies after it handed the KV over, before decode read it; the request ends
    with the right text.

    NIXL (``auto``): the decode replica finds the replica that holds the KV gone and
    refuses the KV at once (fencing: ``kv_fenced``, no read tried), and the request is
    recomputed on decode (the object store, next, has no prefill replica to turn to).
    The object store's payload was put by the dead replica; Ray may still hand decode
    the copy in this node's store (then it is used) or report its owner dead (then decode
    recomputes, with the object store's failure recorded)."""
    prompt = random_prompt(seed, 280)
    prefill = KillAfterPrefill()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        ServePoolClient(handle("Decode")),
        prefill,
        plan=transfer_plan(kind, nixl_available=True),
        timeouts=TransportConfig(prefill_queue_timeout_s=5),
    )
    timings = RequestTimings()
    started = time.monotonic()
    request = GenerateRequest("pk", prompt, _params())
    text = "".join([chunk.text async for chunk in orchestrator.run(request, timings)])
    assert text == _colocated_text(apps, http, prompt)
    failed = [a.transport.value for a in timings.transfer.fallbacks if a.failure is not None]
    if kind == "auto":
        assert timings.transfer.transport is Transport.RECOMPUTE
        assert failed[0] == "nixl", timings.transfer.fallbacks
        fenced = timings.transfer.fallbacks[0].failure
        assert fenced is not None and fenced.kind is FailureKind.KV_FENCED, fenced
    elif timings.transfer.transport is Transport.RECOMPUTE:
        assert failed == ["object_store"], timings.transfer.fallbacks
    else:
        assert timings.transfer.transport is Transport.OBJECT_STORE
        assert not failed and timings.transfer.kv_bytes > 0
    assert time.monotonic() - started < 60
    wait_processes_gone(prefill.engine_pids)
    wait_healthy("Prefill")
    # The app says so too, as a client or a load balancer sees it.
    wait_until(
        lambda: http.get(f"{apps.disaggregated}/health").json()["status"] == "ok",
        30,
        "/health to say every pool serves",
    )
    # The new prefill replica joined a running app: it met the decode replica before it
    # was ready, over every transport, so its first request moves over NIXL at once.
    warmup = call("Prefill", "warmup_report")
    assert warmup["peers"] == 1, warmup
    assert warmup["transports"] == {"nixl": "ok", "object_store": "ok"}, warmup
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": random_prompt(seed + 1, 200)})
    assert body["usage"]["completion_tokens"] == 16
    assert body["splitserve"]["kv_transport"] == "nixl", body["splitserve"]
    assert body["splitserve"]["fallbacks"] == [], body["splitserve"]
    assert_no_kv_held("Prefill", "Decode")
