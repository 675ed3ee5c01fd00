"""Which decode replica holds a conversation: its prefix, and its session.

A decode replica's prefix cache keeps the KV of what it served: the prompt (computed there
or moved from prefill) and the tokens it generated. A chat's next turn repeats all of that
and adds a short new part. Sent to the same replica, only the new part needs computing;
so the remote-or-local decision (:mod:`app.flow.disaggregation`) should count the prompt
tokens that replica *lacks*, not the whole prompt.

:class:`DecodeAffinity` remembers, per decode replica, the chained block hashes
(:func:`app.routing.prefix_affinity.block_hashes`) of every prompt routed there and, once a
request has ended, of its prompt and answer together; and, per ``x-session-id``, the replica
that served the session last. The decode router (``deployments.request_routers``) prefers
that replica, the session's, or else the one with the longest match, unless its queue is
more than ``max_imbalance`` longer than the least loaded's; the orchestrator asks
:meth:`DecodeAffinity.lacking` before deciding.

The router counts in blocks of ``block_tokens``; a replica's prefix cache keeps whole
blocks of its engine's own size (128 tokens on CPU), which the replica reports with its
routing stats (:meth:`DecodeAffinity.cache_block`). What a replica holds is rounded down
to whole cache blocks, so a ``decode_cached`` turn computes no more than was counted.

One instance per process (:func:`shared`): the router runs in the ingress's process, next
to the orchestrator that reads it. Memory is bounded: 65,536
hashes per replica, 65,536 sessions, 4,096 requests in flight.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from app.routing.prefix_affinity import PrefixAffinity, block_hashes
from app.routing.prefix_index import PrefixIndex

MAX_SESSIONS = 65536
MAX_IN_FLIGHT = 4096


class DecodeAffinity:
    """Prefixes and sessions per decode replica (Serve replica unique ids)."""

    def __init__(
        self, block_tokens: int = 64, max_imbalance: int = 4, index: PrefixIndex | None = None
    ) -> None:
        # index: what the engines' KV events said they hold (router.prefix_source:
        # kv_events), instead of what was routed where.
        self.prefixes = PrefixAffinity(block_tokens, max_imbalance, index=index)
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._routed: OrderedDict[str, str] = OrderedDict()  # request id -> replica
        self._cache_blocks: dict[str, int] = {}  # replica -> its engine's block, tokens
        self._lock = threading.Lock()  # Serve may run the router on its own loop thread

    @property
    def block_tokens(self) -> int:
        return self.prefixes.block_tokens

    def cache_block(self, replica: str, tokens: int) -> None:
        """``replica``'s engine caches prefixes in blocks of ``tokens``."""
        self._cache_blocks[replica] = tokens

    def lacking(
        self,
        prompt: Sequence[int],
        session: str | None = None,
        key: str | None = None,
        salt: str | None = None,
    ) -> tuple[int, str | None]:
        """The prompt tokens that the decode replica holding most of this prompt lacks, and
        that replica: the session's if it has one, else the longest match among the
        replicas seen (None, and the whole prompt, when none holds a block of it).
        ``key``: the request's id, under which its hashes are kept for the router."""
        hashes = self.prefixes.hashes(prompt, key, salt)
        best, held = None, 0
        with self._lock:
            owner = self._sessions.get(session) if session else None
            candidates = [owner] if owner is not None else self.prefixes.replicas()
            for replica in candidates:
                tokens = self.prefixes.matched_blocks(replica, hashes) * self.block_tokens
                cache_block = self._cache_blocks.get(replica, self.block_tokens)
                tokens -= tokens % cache_block  # whole blocks of the engine's cache only
                if tokens > held:
                    best, held = replica, tokens
        return len(prompt) - held, best

    def preferred(
        self,
        replicas: Sequence[str],
        queue_lens: dict[str, int],
        prompt: Sequence[int],
        session: str | None = None,
        key: str | None = None,
        salt: str | None = None,
    ) -> str | None:
        """The replica among ``replicas`` that holds the session or the longest prefix of
        ``prompt``, if its queue is within ``max_imbalance`` of the shortest; else None."""
        fair = self.prefixes.fair(replicas, queue_lens)
        with self._lock:
            owner = self._sessions.get(session) if session else None
            if owner in fair:
                return owner
            hashes = self.prefixes.hashes(prompt, key, salt)
            best, matched = None, 0
            for replica in fair:
                count = self.prefixes.matched_blocks(replica, hashes)
                if count > matched:
                    best, matched = replica, count
        return best

    def routed(
        self,
        request_id: str,
        replica: str,
        prompt: Sequence[int],
        session: str | None = None,
        key: str | None = None,
        salt: str | None = None,
    ) -> None:
        """``replica`` got the request: it will hold the prompt's blocks (and the session)."""
        hashes = self.prefixes.hashes(prompt, key, salt)
        with self._lock:
            self.prefixes.record(replica, hashes)
            _remember(self._routed, request_id, replica, MAX_IN_FLIGHT)
            if session:
                _remember(self._sessions, session, replica, MAX_SESSIONS)

    def ended(
        self,
        request_id: str,
        prompt: Sequence[int],
        answer: Sequence[int],
        key: str | None = None,
        salt: str | None = None,
    ) -> None:
        """The request is over; its replica now caches its prompt and ``answer``."""
        with self._lock:
            replica = self._routed.pop(request_id, None)
        if replica is None:
            return
        tokens = [*prompt, *answer]
        hashes = block_hashes(
            tokens, self.block_tokens, self.prefixes.hashes(prompt, key, salt), salt
        )
        with self._lock:
            self.prefixes.record(replica, hashes)

    def retain(self, live: set[str]) -> None:
        """Forget replicas that are gone (dead, scaled down, redeployed)."""
        with self._lock:
            self.prefixes.retain(live)
            for replica in [r for r in self._cache_blocks if r not in live]:
                del self._cache_blocks[replica]
            for session in [s for s, r in self._sessions.items() if r not in live]:
                del self._sessions[session]


def _remember(table: OrderedDict[str, str], key: str, value: str, limit: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


_SHARED: DecodeAffinity | None = None
_SHARED_LOCK = threading.Lock()


def shared(
    block_tokens: int = 64, max_imbalance: int = 4, index: PrefixIndex | None = None
) -> DecodeAffinity:
    """This process's instance, made on first use. One process calls one application's
    decode pool (an ingress replica serves one application), so one instance is enough."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = DecodeAffinity(block_tokens, max_imbalance, index)
        return _SHARED
