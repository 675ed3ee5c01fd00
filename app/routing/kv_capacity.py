"""Decode replica choice by capacity: the most free KV cache first, then the shortest queue.

Replicas report ``kv_cache_usage`` (0..1) and ``running`` / ``waiting`` request counts
(``LLMServer.record_routing_stats``); a replica that has not reported yet ranks as empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def rank_by_capacity(
    replicas: Sequence[str], stats: dict[str, dict[str, Any]], queue_lens: dict[str, int]
) -> list[list[str]]:
    def key(replica: str) -> tuple[float, int]:
        reported = stats.get(replica) or {}
        usage = float(reported.get("kv_cache_usage", 0.0))
        waiting = int(reported.get("waiting", 0))
        return (usage + 0.05 * waiting, queue_lens.get(replica, 0))

    return [[r] for r in sorted(replicas, key=key)]
