"""The decode replicas' fence asks Ray's GCS once for requests that arrive together."""

import asyncio
import time

from deployments.pool_probe import ReplicaLiveness


async def test_concurrent_asks_share_one_gcs_call_and_a_death_is_kept(monkeypatch):
    calls: list[str] = []
    alive = {"p1": True, "p2": False}

    def actor_alive(unique_id: str) -> bool:
        calls.append(unique_id)
        time.sleep(0.05)
        return alive[unique_id]

    liveness = ReplicaLiveness("app", "Prefill", ttl_s=60)
    monkeypatch.setattr(liveness, "_actor_alive", actor_alive)
    answers = await asyncio.gather(*(liveness("p1") for _ in range(10)), liveness("p2"))
    assert answers == [True] * 10 + [False]
    assert sorted(calls) == ["p1", "p2"]
    alive["p2"] = True  # a dead replica's name never comes back to life
    assert await liveness("p1") and not await liveness("p2")
    assert sorted(calls) == ["p1", "p2"]
