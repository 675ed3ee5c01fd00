"""Decode replica choice by capacity: a replica with room in its KV cache before one that
is nearly full, then the shortest queue, then the most free KV cache.

Replicas report ``kv_cache_usage`` (0..1) and ``running`` / ``waiting`` request counts
(``LLMServer.record_routing_stats``, once a second); a replica that has not reported yet
ranks as empty. The queue is the router's own count of the requests it has in flight on
each replica, fresh at every choice. The reports are up to a period old, so they decide
only where they matter: a cache near full (:data:`TIGHT_USAGE`), where one more long
request would make the engine preempt; and between replicas of equal queues. Ranked by
reported usage first, every request of a period would go to the replica that looked
freest at its last report, however many were already sent there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# A KV cache this full (share of its blocks) ranks after every replica with room.
TIGHT_USAGE = 0.8
# What a request waiting in the engine counts for, in usage: it holds no block yet but
# will.
WAITING_USAGE = 0.05


def rank_by_capacity(
    replicas: Sequence[str], stats: dict[str, dict[str, Any]], queue_lens: dict[str, int]
) -> list[list[str]]:
    def key(replica: str) -> tuple[bool, int, float]:
        reported = stats.get(replica) or {}
        usage = float(reported.get("kv_cache_usage", 0.0))
        waiting = int(reported.get("waiting", 0))
        return (usage >= TIGHT_USAGE, queue_lens.get(replica, 0), usage + WAITING_USAGE * waiting)

    return [[r] for r in sorted(replicas, key=key)]
