"""The transport chain against real engines: object store, NIXL → object store, → recompute.

Each test drives the same :class:`Orchestrator` the ingress uses, over Serve handles to
the real Prefill and Decode deployments, with a wrapper that breaks one transport the way
a real fault would (an unreachable NIXL peer, an object that is not a KV payload).
"""

import re
import socket
import time
import uuid
from dataclasses import replace

import numpy as np
import ray

from app.config import Mode
from app.config.routing import MigrationConfig
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind
from app.kv.fallback import Transport
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult
from deployments.pool_client import ServePoolClient
from tests.integration.conftest import TEST_KV_LEASE_S
from tests.integration.faults import assert_no_kv_held, handle, wait_until
from tests.integration.helpers import GREEDY, complete, random_prompt

NX, OS, RC = Transport.NIXL, Transport.OBJECT_STORE, Transport.RECOMPUTE
# A failed attempt's NIXL blocks are freed this soon after the request ends; their lease
# (TEST_KV_LEASE_S from the prefill) would take longer.
RELEASED_WITHIN_S = TEST_KV_LEASE_S / 3


class Breaker(PoolClient):
    """Wraps the real prefill pool and spoils the hand-over of the transports in ``broken``."""

    def __init__(self, inner, broken=(), nixl_peer=("127.0.0.1", 1)):
        self.inner = inner
        self.broken = set(broken)
        self.nixl_peer = nixl_peer

    async def prefill(self, request, transport):
        async for item in self.inner.prefill(request, transport):
            yield self._spoil(item, transport)

    def _spoil(self, result, transport):
        if not isinstance(result, PrefillResult) or transport not in self.broken:
            return result
        if transport is NX:
            # A peer that never answers: a new engine id (no cached handshake), and by
            # default a closed port (or ``nixl_peer``, e.g. a listener that never replies).
            host, port = self.nixl_peer
            params = {
                **(result.kv_transfer_params or {}),
                "remote_engine_id": f"gone-{uuid.uuid4()}",
                "remote_host": host,
                "remote_port": port,
            }
            return replace(result, kv_transfer_params=params)
        return replace(result, kv_object=ray.put(np.zeros(64, dtype=np.uint8)))

    def generate(self, request):
        raise AssertionError("not a decode pool")

    async def release(self, result):
        await self.inner.release(result)


def _orchestrator(plan, broken=(), nixl_peer=("127.0.0.1", 1), **options):
    prefill = Breaker(ServePoolClient(handle("Prefill")), broken, nixl_peer)
    decode = ServePoolClient(handle("Decode"))
    return Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=plan, **options)


async def _chunks(orchestrator, prompt, request_id, timings):
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    request = GenerateRequest(request_id, prompt, params)
    return [c async for c in orchestrator.run(request, timings)]


async def _serve(orchestrator, prompt, request_id):
    timings = RequestTimings()
    chunks = await _chunks(orchestrator, prompt, request_id, timings)
    return "".join(c.text for c in chunks), timings.transfer


def _plasma_objects() -> int:
    from ray._private.internal_api import memory_summary

    found = re.search(r"(\d+) objects", memory_summary(stats_only=True))
    return int(found.group(1)) if found else 0


def assert_objects_freed(before: int) -> None:
    """Every KV payload object is freed (reference counts drop asynchronously)."""
    wait_until(lambda: _plasma_objects() <= before, 20, "KV payload objects to be freed")


def _colocated(apps, http, prompt):
    return complete(http, apps.colocated, {**GREEDY, "prompt": prompt})["choices"][0]["text"]


async def test_object_store_transport_matches_colocated(apps, http):
    objects_before = _plasma_objects()
    orchestrator = _orchestrator((OS, RC))
    for n, length in enumerate([5, 130, 300, 700]):
        prompt = random_prompt(7100 + n, length)
        text, report = await _serve(orchestrator, prompt, f"os-{n}")
        assert report.transport is OS, report
        assert not report.fallbacks
        assert report.kv_bytes > 0
        assert text == _colocated(apps, http, prompt)
    assert_no_kv_held("Prefill", "Decode")
    assert_objects_freed(objects_before)


async def test_nixl_failure_falls_back_to_the_object_store(apps, http):
    prompt = random_prompt(7200, 260)
    text, report = await _serve(_orchestrator((NX, OS, RC), broken={NX}), prompt, "nx-fail")
    assert report.transport is OS
    kinds = [(a.transport, a.failure and a.failure.kind) for a in report.fallbacks]
    assert kinds == [(NX, FailureKind.KV_LOAD)]
    assert text == _colocated(apps, http, prompt)
    # The spoiled NIXL hand-over left blocks on prefill: the failed attempt frees them at
    # once, well before their lease would.
    assert_no_kv_held("Prefill", "Decode", timeout_s=RELEASED_WITHIN_S)


async def test_both_transports_failing_recompute(apps, http):
    objects_before = _plasma_objects()
    prompt = random_prompt(7300, 200)
    text, report = await _serve(_orchestrator((NX, OS, RC), broken={NX, OS}), prompt, "both-fail")
    assert report.transport is RC
    # The spoiled object is a byte array, not a KV payload: fetched fine, refused by the
    # decode engine's connector.
    assert [(a.transport, a.failure.kind) for a in report.fallbacks] == [
        (NX, FailureKind.KV_LOAD),
        (OS, FailureKind.KV_LOAD),
    ]
    assert text == _colocated(apps, http, prompt)
    assert_no_kv_held("Prefill", "Decode", timeout_s=RELEASED_WITHIN_S)
    assert_objects_freed(objects_before)


def test_http_response_reports_the_transfer(apps, http):
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": random_prompt(7400, 300)})
    timing = body["splitserve"]
    assert timing["kv_transport"] == "nixl" and timing["fallbacks"] == []
    # Measured by the decode engine's connector: the blocks it read, and how long.
    assert timing["kv_bytes"] > 0 and timing["kv_fetch_ms"] > 0
    assert 0 < timing["prefill_ms"] <= timing["ttft_ms"]
    assert timing["kv_fetch_ms"] < timing["ttft_ms"]


async def test_a_hung_nixl_read_past_the_stall_timeout_falls_back_unmoved(apps, http):
    """The first token comes from prefill; the NIXL read then hangs (a peer that accepts the
    connection and never answers) for longer than ``stall_timeout_s``. The stall watch
    guards decode's stream, not the hand-off: the request is answered in full by the
    object store, and nothing is migrated."""
    stall_timeout_s = 1.0
    with socket.socket() as black_hole:
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(8)  # accepted by the kernel, never read, never answered
        orchestrator = _orchestrator(
            (NX, OS, RC),
            broken={NX},
            nixl_peer=black_hole.getsockname(),
            migration=MigrationConfig(stall_timeout_s=stall_timeout_s),
            first_token_on_prefill=True,
        )
        prompt = random_prompt(7500, 240)
        timings = RequestTimings()
        started = time.monotonic()
        chunks = await _chunks(orchestrator, prompt, "nx-hung", timings)
        took_s = time.monotonic() - started
    assert chunks[0].from_prefill, "the first token did not come from prefill"
    assert took_s > 2 * stall_timeout_s, f"the read did not hang ({took_s:.1f} s)"
    report, text = timings.transfer, "".join(c.text for c in chunks)
    assert report.transport is OS, report
    kinds = [(a.transport, a.failure and a.failure.kind) for a in report.fallbacks]
    assert kinds == [(NX, FailureKind.KV_LOAD)]
    assert timings.migrations == []
    assert text == _colocated(apps, http, prompt)
    assert_no_kv_held("Prefill", "Decode", timeout_s=RELEASED_WITHIN_S)
