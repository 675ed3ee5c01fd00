"""Ray Serve request routers for the engine pools (Serve's custom request router API).

They run inside the caller's process (the ingress) and apply the pure policies of
``app/routing``. A call that names its replica (a :class:`~app.pool.records.KvRelease`, a
:class:`~app.pool.records.BlocksQuery`, or a warm-up's ``GenerateRequest.replica``) goes
to that replica, or, where it is not (yet, or any more) among the running ones, to any:
a release then finds nothing to free, a query gets no answer (that replica has left),
a warm-up pairs with another replica.

With ``prefix_source: kv_events`` both routers match prompts against the pool's
:class:`~app.routing.prefix_index.PrefixIndex` (what the engines' KV events said), shared
with the ingress that fills it; the routers tell it which replicas are live.

Calls that carry no ``GenerateRequest`` (stats, health probes) get Serve's plain choice
among all candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from app.pool.records import BlocksQuery, GenerateRequest, KvRelease
from app.routing import prefix_index, routed_expectations
from app.routing.decode_affinity import shared
from app.routing.kv_capacity import rank_by_capacity
from app.routing.prefix_affinity import PrefixAffinity


def _generate_request(pending: PendingRequest | None) -> GenerateRequest | None:
    if pending is None or not pending.args:
        return None
    first = pending.args[0]
    return first if isinstance(first, GenerateRequest) else None


def running_blocks(request: GenerateRequest, hashes: Sequence[int], block: int) -> int:
    """The KV blocks ``request`` takes in its engine beyond its prompt's whole ``hashes``
    soon after it is routed (the prompt's partial last block, the answer's first), in
    blocks of ``block`` tokens. An engine allocates an answer's blocks as it makes its
    tokens, so at most one block of ``max_tokens`` counts: a client that leaves it
    unset (up to the model's length) would otherwise seem to fill the cache."""
    if block <= 0:
        return 0
    answer = min(getattr(request.sampling_params, "max_tokens", None) or 0, block)
    return max(0, -(-(len(request.prompt_token_ids) + answer) // block) - len(hashes))


def pinned_ranks(
    pending: PendingRequest | None, candidates: list[RunningReplica]
) -> list[list[RunningReplica]] | None:
    """The replica a call names, as Serve's ranks; None for a call that names none."""
    if pending is None or not pending.args:
        return None
    first = pending.args[0]
    if not isinstance(first, KvRelease | GenerateRequest | BlocksQuery) or not first.replica:
        return None
    named = [r for r in candidates if r.replica_id.unique_id == first.replica]
    return [named or candidates]


def _index(pool: str, prefix_source: str) -> prefix_index.PrefixIndex | None:
    """This process's index of ``pool``'s engines' KV events, where the routers read one."""
    return prefix_index.shared(pool) if prefix_source == "kv_events" else None


class _RankingRouter(FIFOMixin, RequestRouter):  # type: ignore[misc]
    index: prefix_index.PrefixIndex | None = None

    def _queue_lens(self, replicas: list[RunningReplica]) -> dict[str, int]:
        """Each replica's queue as Serve counts it, less the ingress's own questions of
        its cache held there (``PrefixIndex.requests_queued``)."""
        cache = self.replica_queue_len_cache
        lens = {r.replica_id.unique_id: cache.get(r.replica_id) or 0 for r in replicas}
        index = self.index
        if index is None:
            return lens
        return {replica: index.requests_queued(replica, n) for replica, n in lens.items()}

    @staticmethod
    def _by_id(replicas: list[RunningReplica]) -> dict[str, RunningReplica]:
        return {r.replica_id.unique_id: r for r in replicas}


class PrefixAffinityRouter(_RankingRouter):
    """Prefill pool: the replica that most likely caches the prompt's prefix."""

    def initialize_state(
        self,
        block_tokens: int = 64,
        max_imbalance: int = 4,
        pool: str = "",
        prefix_source: str = "routed",
        **_: Any,
    ) -> None:
        index = self.index = _index(pool, prefix_source)
        self.policy = PrefixAffinity(
            block_tokens=block_tokens, max_imbalance=max_imbalance, index=index
        )

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        pinned = pinned_ranks(pending_request, candidate_replicas)
        if pinned is not None:
            return pinned
        request = _generate_request(pending_request)
        if request is None:
            return [candidate_replicas]
        by_id = self._by_id(candidate_replicas)
        ranks = self.policy.rank(
            list(by_id),
            self._queue_lens(candidate_replicas),
            self.policy.hashes(request.prompt_token_ids, request.request_id, request.cache_salt),
        )
        return [[by_id[r] for r in rank] for rank in ranks]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        request = _generate_request(pending_request)
        if request is not None:
            hashes = self.policy.hashes(
                request.prompt_token_ids, request.request_id, request.cache_salt
            )
            held = self.policy.matched_blocks(replica_id.unique_id, hashes)
            routed_expectations.note(request.request_id, held * self.policy.block_tokens)
            more = running_blocks(request, hashes, self.policy.block_tokens)
            self.policy.record(replica_id.unique_id, hashes, more)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.policy.forget(replica_id.unique_id)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        # Replicas a downscale or a redeploy removed leave here, not by dying: their
        # prefix memory (up to max_blocks hashes each) must go with them.
        super().update_replicas(replicas)
        self.policy.retain({r.replica_id.unique_id for r in replicas})


class KVCapacityRouter(_RankingRouter):
    """Decode pool: the replica that holds the request's session or the longest prefix of
    its prompt (app.routing.decode_affinity), unless its queue is too long; else the one
    with room in its KV cache, then the shortest queue, then the most free KV cache
    (app.routing.kv_capacity)."""

    def initialize_state(
        self,
        block_tokens: int = 64,
        max_imbalance: int = 4,
        pool: str = "",
        prefix_source: str = "routed",
        **_: Any,
    ) -> None:
        index = self.index = _index(pool, prefix_source)
        self.affinity = shared(block_tokens, max_imbalance, index)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        pinned = pinned_ranks(pending_request, candidate_replicas)
        if pinned is not None:
            return pinned
        request = _generate_request(pending_request)
        if request is None:
            return [candidate_replicas]
        by_id = self._by_id(candidate_replicas)
        stats = {r.replica_id.unique_id: dict(r.routing_stats or {}) for r in candidate_replicas}
        for replica, figures in stats.items():
            if figures.get("cache_block_tokens"):
                self.affinity.cache_block(replica, int(figures["cache_block_tokens"]))
        queue_lens = self._queue_lens(candidate_replicas)
        ranks = rank_by_capacity(list(by_id), stats, queue_lens)
        holder = self.affinity.preferred(
            list(by_id),
            queue_lens,
            request.prompt_token_ids,
            request.session_id,
            request.request_id,
            request.cache_salt,
        )
        if holder is not None:
            ranks = [[holder]] + [rank for rank in ranks if rank != [holder]]
        return [[by_id[r] for r in rank] for rank in ranks]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        request = _generate_request(pending_request)
        if request is not None:
            self.affinity.routed(
                request.origin_id or request.request_id,
                replica_id.unique_id,
                request.prompt_token_ids,
                request.session_id,
                request.request_id,
                request.cache_salt,
            )

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self.affinity.retain({r.replica_id.unique_id for r in replicas})
