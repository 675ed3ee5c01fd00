"""Readiness: starting until every pool has answered; then serving, degraded (a pool
without a replica) or unavailable (the streaming pool gone); what /health says."""

import asyncio
from typing import Any

from app.api.readiness import PoolState, Readiness


class Pools:
    """A probe over pools whose answers the test sets."""

    def __init__(self, **serving: bool | None):
        self.serving = serving
        self.calls: list[tuple[str, bool]] = []

    async def __call__(self, pool: str, ever: bool) -> bool:
        self.calls.append((pool, ever))
        if self.serving[pool] is None:
            await asyncio.sleep(3600)  # hangs: the probe's timeout must end it
        return bool(self.serving[pool])


def _readiness(pools: Any, **kw: Any) -> Readiness:
    return Readiness(("prefill", "decode"), "decode", pools, **kw)


def test_starting_until_every_pool_has_answered():
    pools = Pools(prefill=False, decode=True)
    readiness = _readiness(pools)
    asyncio.run(readiness.probe_once())
    assert not readiness.ready
    health = readiness.health()
    assert health.status == 503 and (health.retry_after_s or 0) >= 1
    assert health.body["status"] == "starting"
    assert health.body["pools"] == {"prefill": "starting", "decode": "serving"}
    assert "prefill" in health.body["detail"] and "prefill" in readiness.not_ready_error()
    pools.serving["prefill"] = True
    asyncio.run(readiness.probe_once())
    assert readiness.ready and readiness.health().status == 200
    assert readiness.health().body == {
        "status": "ok",
        "pools": {"prefill": "serving", "decode": "serving"},
    }


def test_the_probe_is_told_whether_the_pool_ever_served():
    pools = Pools(prefill=True, decode=True)
    readiness = _readiness(pools)
    asyncio.run(readiness.probe_once())
    asyncio.run(readiness.probe_once())
    assert sorted(pools.calls) == [
        ("decode", False),
        ("decode", True),
        ("prefill", False),
        ("prefill", True),
    ]


def test_a_lost_prefill_pool_degrades_and_a_lost_decode_pool_is_unavailable():
    pools = Pools(prefill=True, decode=True)
    readiness = _readiness(pools)
    asyncio.run(readiness.probe_once())
    pools.serving["prefill"] = False
    asyncio.run(readiness.probe_once())
    assert readiness.ready  # ready once, ready for good: degraded is not starting
    assert readiness.states["prefill"] is PoolState.DEGRADED and not readiness.serving("prefill")
    health = readiness.health()
    assert health.status == 200 and health.body["status"] == "degraded"
    assert health.body["degraded"] == ["prefill"]
    pools.serving["decode"] = False
    asyncio.run(readiness.probe_once())
    health = readiness.health()
    assert health.status == 503 and health.body["status"] == "unavailable"
    assert "decode" in health.body["detail"]
    pools.serving.update(prefill=True, decode=True)
    asyncio.run(readiness.probe_once())
    assert readiness.health().body["status"] == "ok"


def test_a_probe_that_hangs_or_raises_counts_as_not_serving():
    pools = Pools(prefill=None, decode=True)
    readiness = _readiness(pools, timeout_s=0.05)
    asyncio.run(readiness.probe_once())
    assert readiness.states["prefill"] is PoolState.STARTING

    async def broken(pool, ever):
        raise RuntimeError("controller unreachable")

    readiness = _readiness(broken)
    asyncio.run(readiness.probe_once())
    assert not readiness.ready


def test_start_probes_until_ready_then_keeps_going():
    pools = Pools(prefill=False, decode=True)

    async def scenario():
        readiness = _readiness(pools, interval_s=0.01)
        readiness.start()
        readiness.start()  # idempotent
        await asyncio.sleep(0.05)
        assert not readiness.ready
        pools.serving["prefill"] = True
        await asyncio.sleep(0.05)
        assert readiness.ready
        pools.serving["prefill"] = False
        await asyncio.sleep(0.05)
        assert readiness.states["prefill"] is PoolState.DEGRADED
        readiness._task.cancel()

    asyncio.run(scenario())


def test_the_first_look_is_bounded_and_can_find_the_app_ready():
    async def scenario():
        hanging = _readiness(Pools(prefill=None, decode=True), timeout_s=60)
        started = asyncio.get_running_loop().time()
        await hanging.first_look(0.05)
        assert asyncio.get_running_loop().time() - started < 1
        assert not hanging.ready and hanging.states["prefill"] is PoolState.STARTING
        assert hanging.states["decode"] is PoolState.SERVING  # it answered in time
        running = _readiness(Pools(prefill=True, decode=True))
        await running.first_look(1.0)
        assert running.ready  # an ingress added to a running app starts ready

    asyncio.run(scenario())
