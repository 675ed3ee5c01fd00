"""Pair warm-ups run all at once, each within its timeout; per transport, the first failure."""

import asyncio

from app.engine import warmup
from app.engine.warmup import WarmupReport, warm_peers
from app.kv.fallback import Transport
from app.pool.client import PoolClient


async def test_a_wedged_peer_delays_no_other_pair_and_is_named(monkeypatch):
    monkeypatch.setattr(warmup, "PAIR_TIMEOUT_S", 0.2)
    in_flight = 0
    most = 0
    done = []

    async def pair(peer: str, transport: Transport) -> str:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            if peer == "wedged":
                await asyncio.Event().wait()
            await asyncio.sleep(0.05)
            done.append((peer, transport))
            return "ok"
        finally:
            in_flight -= 1

    report = WarmupReport()
    transports = (Transport.NIXL, Transport.OBJECT_STORE)
    await warm_peers(pair, ["good", "wedged"], transports, report)
    assert most == 4  # every peer x transport at once
    assert sorted(done) == sorted(("good", t) for t in transports)
    for transport in transports:
        assert report.transports[transport.value] == "replica wedged: no answer within 0.2 s"
    assert report.peers == 2


async def test_a_prefill_replica_joining_pairs_for_a_short_while_only(monkeypatch):
    """Decode replicas that are starting too wait for a prefill replica: the joining one
    must not wait for them (a redeploy restarting both pools deadlocked until the long
    pair timeout)."""
    from app.engine.warmup import JOIN_PAIR_TIMEOUT_S, warm_pair_from_prefill

    monkeypatch.setattr(warmup, "JOIN_PAIR_TIMEOUT_S", 0.2)
    assert JOIN_PAIR_TIMEOUT_S < warmup.PAIR_TIMEOUT_S / 10

    class Server:
        engine_id = "prefill-1"

        async def prefill(self, request, transport):
            from app.pool.records import PrefillResult

            yield PrefillResult({"remote_block_ids": [[1]]}, 3)

    class StartingDecode(PoolClient):
        async def prefill(self, request, transport):
            raise AssertionError("a decode pool never prefills")
            yield

        async def generate(self, request):
            await asyncio.Event().wait()  # no decode replica to route to yet
            yield

    monkeypatch.setattr(warmup, "_prompt", lambda server, tokens, seed: [1] * 4)
    report = WarmupReport()
    await asyncio.wait_for(
        warm_pair_from_prefill(Server(), StartingDecode(), (Transport.NIXL,), report, ["d1"]),
        timeout=120,  # (the first SamplingParams imports vLLM)
    )
    assert report.transports["nixl"] == "replica d1: no answer within 0.2 s"
