"""Prefix-affinity replica choice: requests sharing a prompt prefix go to the same replica.

A prompt is cut into blocks of ``block_tokens`` tokens; block ``i``'s hash covers blocks
``0..i`` (a chain, as vLLM's prefix cache hashes blocks), so two prompts share the first
``k`` hashes exactly when they share the first ``k`` blocks. The policy remembers, per
replica, the hashes of the prompts it routed there (bounded, least recently used first
out) and prefers the replica with the longest match, unless its queue is more than
``max_imbalance`` requests longer than the least loaded replica's: then load wins, so one
hot prefix cannot overload a replica. A prompt nobody has seen goes to the shortest queue,
and among equals to the replica that holds the fewest prefixes.

A request's hashes are worked out once: :meth:`PrefixAffinity.hashes` keeps the last
requests' by request id (the ranking, the record after routing and, for decode, the
remote-or-local decision and the answer's extension all ask for them), and
:func:`block_hashes` extends a known chain instead of hashing its blocks again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.routing.prefix_index import PrefixIndex


def chain_root(salt: str | None) -> int:
    """Where a chain starts: 0, or under a ``cache_salt`` a value of the salt that is the
    same in every process (Python's ``hash`` of a string is not), so that an engine
    replica (:mod:`app.routing.engine_blocks`) and the router name a block alike."""
    if not salt:
        return 0
    return int.from_bytes(hashlib.blake2b(salt.encode(), digest_size=8).digest(), "big")


def chain_step(previous: int, tokens: Sequence[int]) -> int:
    """The chain's value after one more block of ``tokens`` (a hash of ints and tuples of
    ints: the same in every process)."""
    return hash((previous, tuple(tokens)))


def block_hashes(
    token_ids: Sequence[int], block_tokens: int, known: Sequence[int] = (), salt: str | None = None
) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids``; ``known``: the hashes of its
    first blocks, already worked out (of a prefix of ``token_ids``), which are kept.
    ``salt``: the request's ``cache_salt``, which starts the chain as it starts vLLM's,
    so prompts of two salts share no block here either."""
    hashes = list(known)
    previous = hashes[-1] if hashes else chain_root(salt)
    for start in range(len(hashes) * block_tokens, len(token_ids) - block_tokens + 1, block_tokens):
        previous = chain_step(previous, token_ids[start : start + block_tokens])
        hashes.append(previous)
    return hashes


MEMO_SIZE = 1024  # requests whose hashes are kept (about the ones in flight)


class PrefixAffinity:
    """Remembers which replica saw which prefixes and ranks replicas for a new prompt."""

    def __init__(
        self,
        block_tokens: int = 64,
        max_imbalance: int = 4,
        max_blocks_per_replica: int = 65536,
        index: PrefixIndex | None = None,
    ) -> None:
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        self._block_tokens = block_tokens
        self.max_imbalance = max_imbalance
        self.max_blocks = max_blocks_per_replica
        # With an index (router.prefix_source: kv_events), what each replica holds is
        # what its engine's KV events said, in its engine's blocks; else what was routed.
        self.index = index
        self._seen: dict[str, OrderedDict[int, None]] = {}
        self._memo: OrderedDict[tuple[str, int, int], list[int]] = OrderedDict()

    @property
    def block_tokens(self) -> int:
        """Tokens per hashed block: the engines' block once the index has heard of it."""
        if self.index is not None and self.index.block_tokens:
            return self.index.block_tokens
        return self._block_tokens

    def hashes(
        self, token_ids: Sequence[int], key: str | None = None, salt: str | None = None
    ) -> list[int]:
        """The chained block hashes of ``token_ids`` (under ``salt``). ``key`` (a request
        id: the same key must always come with the same tokens and salt) keeps them for
        the next ask."""
        block = self.block_tokens
        if key is None:
            return block_hashes(token_ids, block, salt=salt)
        memo = (key, len(token_ids), block)
        found = self._memo.get(memo)
        if found is None:
            found = self._memo[memo] = block_hashes(token_ids, block, salt=salt)
            if len(self._memo) > MEMO_SIZE:
                self._memo.popitem(last=False)
        return found

    def matched_blocks(self, replica: str, hashes: Sequence[int]) -> int:
        """How many of ``hashes``, from the first, ``replica`` holds: by the index where
        there is one, else by what was routed there."""
        if self.index is not None:
            return self.index.matched_blocks(replica, hashes)
        return self.routed_blocks(replica, hashes)

    def routed_blocks(self, replica: str, hashes: Sequence[int]) -> int:
        """How many of ``hashes``, from the first, were routed to ``replica``."""
        seen = self._seen.get(replica)
        if not seen:
            return 0
        count = 0
        for value in hashes:
            if value not in seen:
                break
            count += 1
        return count

    def rank(
        self, replicas: Sequence[str], queue_lens: dict[str, int], hashes: Sequence[int]
    ) -> list[list[str]]:
        """Replicas best first, as Serve's routers expect (a list of ranks)."""
        if not replicas:
            return []
        fair = self.fair(replicas, queue_lens)
        # Longest cached prefix first; then the shorter queue; then the replica given
        # fewer prefixes, so new prefixes spread over the pool instead of piling onto one.
        # With an index, a prefix no replica holds any more (evicted everywhere) goes
        # back where it was routed before, rather than being spread over both caches.
        ordered = sorted(
            fair,
            key=lambda r: (
                -self.matched_blocks(r, hashes),
                -self.routed_blocks(r, hashes) if self.index is not None else 0,
                queue_lens.get(r, 0),
                self.held(r),
            ),
        )
        overloaded = sorted(
            (r for r in replicas if r not in fair), key=lambda r: queue_lens.get(r, 0)
        )
        return [[r] for r in ordered + overloaded]

    def fair(self, replicas: Sequence[str], queue_lens: dict[str, int]) -> list[str]:
        """The replicas whose queue is at most ``max_imbalance`` longer than the shortest:
        those affinity may choose from (past that, load wins)."""
        least = min((queue_lens.get(r, 0) for r in replicas), default=0)
        return [r for r in replicas if queue_lens.get(r, 0) - least <= self.max_imbalance]

    def held(self, replica: str) -> int:
        """How many prefix blocks were routed to ``replica`` (with an index too: the
        tie-break that spreads new prefixes over the pool must not wait for a read of
        the engines, nor favour the replica whose warm-up cached the least)."""
        return len(self._seen.get(replica, ()))

    def record(self, replica: str, hashes: Sequence[int], more_blocks: int = 0) -> None:
        """``replica`` now holds (or will hold) these prefix blocks (and, while the
        request runs, ``more_blocks`` beyond them: :meth:`PrefixIndex.routed`)."""
        if self.index is not None:
            self.index.routed(replica, hashes, more_blocks)
        seen = self._seen.setdefault(replica, OrderedDict())
        for value in hashes:
            seen[value] = None
            seen.move_to_end(value)
        while len(seen) > self.max_blocks:
            seen.popitem(last=False)

    def replicas(self) -> list[str]:
        """The replicas whose prefixes are remembered."""
        if self.index is not None:
            return self.index.replicas()
        return list(self._seen)

    def forget(self, replica: str) -> None:
        if self.index is not None:
            self.index.forget(replica)
        self._seen.pop(replica, None)

    def retain(self, live: set[str]) -> None:
        """Forget every replica not in ``live`` (removed by a downscale or a redeploy)."""
        if self.index is not None:
            self.index.retain(live)
        for replica in [r for r in self._seen if r not in live]:
            del self._seen[replica]
