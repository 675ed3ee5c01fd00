"""What one engine's prefix cache holds, read from its KV events, in the router's hashes.

vLLM publishes every change to an engine's prefix cache (``kv_events_config``): a
``BlockStored`` names the blocks it cached (the engine's block hashes, the parent block's
hash and the blocks' token ids), a ``BlockRemoved`` those it evicted, an
``AllBlocksCleared`` a reset. Rather than recompute the engine's hashes for every prompt
in the ingress (sha256 per block, under the engine's algorithm and seed), each stored
block is named here by the router's own chain,
:func:`app.routing.prefix_affinity.block_hashes`, worked out from the event's token ids
and its parent's chain value: the hashes a router computes from a prompt at the engine's
block size are the ones listed here exactly when the engine holds those blocks. A
``cache_salt`` (in the first block's extra keys) starts the chain as it starts the
router's.

:class:`EngineBlocks` keeps the blocks held and a log of the changes, numbered
(``version``), so that a reader far away asks only for what changed since its last look
(:meth:`EngineBlocks.changes`); a reader too far behind, or of another ``epoch`` (another
engine, or this one after lost events), gets every block held instead.

A block whose parent was never seen (its store event lost, or stored before this reader
started) cannot be named, nor can its descendants: they count in ``unnamed`` and are left
out, so the index can miss a block an engine holds but never lists one it does not.
"""

from __future__ import annotations

import uuid
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.routing.prefix_affinity import chain_root, chain_step

LOG_SIZE = 4096  # changes kept for readers behind


@dataclass(frozen=True)
class BlockChanges:
    """What changed in an engine's cache since a reader's ``since`` (or, ``full``, every
    block it holds), as of ``version`` of ``epoch``."""

    epoch: str
    version: int
    block_tokens: int
    full: bool
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    capacity: int = 0  # the engine's KV blocks (0: not known)


class EngineBlocks:
    """One engine's cached blocks, named by the router's chain, from its KV events."""

    def __init__(self, block_tokens: int, log_size: int = LOG_SIZE, capacity: int = 0) -> None:
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        self.block_tokens = block_tokens
        self.capacity = capacity  # the engine's KV blocks, told to readers (0: not known)
        self.epoch = uuid.uuid4().hex
        self.version = 0
        self.unnamed = 0  # stored blocks whose chain could not be named
        self._named: dict[Any, int] = {}  # engine's hash -> the router's
        self._held: Counter[int] = Counter()  # the router's hash -> engine blocks
        self._log: deque[tuple[int, list[int], list[int]]] = deque(maxlen=log_size)

    @property
    def held(self) -> int:
        return len(self._held)

    def apply(self, events: Iterable[Any]) -> None:
        """Apply one batch of vLLM's KV events (``BlockStored``, ``BlockRemoved``,
        ``AllBlocksCleared``, told apart by name; events of another medium than the
        engine's own memory, an offload tier's, are ignored)."""
        last: dict[int, bool] = {}  # each block's last change: held or not
        for event in events:
            kind = type(event).__name__
            if kind == "AllBlocksCleared":
                self._clear()
                last.clear()
                continue
            if getattr(event, "medium", None) not in (None, "GPU", "CPU"):
                continue
            if kind == "BlockStored":
                last.update((ours, True) for ours in self._stored(event))
            elif kind == "BlockRemoved":
                last.update((ours, False) for ours in self._removed(event.block_hashes))
        added, removed = _split(last)
        if added or removed:
            self.version += 1
            self._log.append((self.version, added, removed))

    def _stored(self, event: Any) -> list[int]:
        size = int(event.block_size)
        if size != self.block_tokens or event.lora_id or getattr(event, "lora_name", None):
            # A partial block (hybrid models), or a LoRA's: prompts routed here are the
            # base model's and whole blocks; leave them out.
            self.unnamed += len(event.block_hashes)
            return []
        if event.parent_block_hash is None:
            previous: int | None = chain_root(_salt(event))
        else:
            previous = self._named.get(event.parent_block_hash)
        added = []
        tokens: Sequence[int] = event.token_ids
        for i, engine_hash in enumerate(event.block_hashes):
            if previous is None:
                self.unnamed += len(event.block_hashes) - i
                break
            previous = chain_step(previous, tokens[i * size : (i + 1) * size])
            if engine_hash in self._named:  # re-reported (a prefix-cache hit): held already
                continue
            self._named[engine_hash] = previous
            added.append(previous)
        # The last block first: an engine frees a request's blocks in reverse, so its
        # cache evicts a prompt from the tail, and readers keep the blocks in that order.
        added.reverse()
        for ours in added:
            self._held[ours] += 1
        return added

    def _removed(self, engine_hashes: Iterable[Any]) -> list[int]:
        removed = []
        for engine_hash in engine_hashes:
            ours = self._named.pop(engine_hash, None)
            if ours is None:
                continue
            self._held[ours] -= 1
            if self._held[ours] <= 0:
                del self._held[ours]
                removed.append(ours)
        return removed

    def _clear(self) -> None:
        self._named.clear()
        self._held.clear()
        self._log.clear()
        self.epoch = uuid.uuid4().hex  # every reader starts again from the full set

    def lost(self) -> None:
        """Events were lost and could not be replayed: forget everything (a missed
        removal would list a block the engine no longer holds) and start a new epoch.
        Blocks stored before now come back as requests reuse them (vLLM reports a
        prefix-cache hit as a store)."""
        self._clear()
        self.version += 1

    def changes(self, epoch: str | None, since: int) -> BlockChanges:
        """What changed after ``since`` in ``epoch``; every block held if the reader is
        of another epoch or further behind than the log reaches."""
        oldest = self._log[0][0] if self._log else self.version + 1
        if epoch != self.epoch or since < oldest - 1 or since > self.version:
            return BlockChanges(
                self.epoch,
                self.version,
                self.block_tokens,
                True,
                list(self._held),
                capacity=self.capacity,
            )
        # Each block as its last change left it: a block stored and evicted since counts
        # as removed (a reader may expect it), one evicted and stored again as added.
        last: dict[int, bool] = {}
        for version, plus, minus in self._log:
            if version > since:
                last.update((ours, False) for ours in minus)
                last.update((ours, True) for ours in plus)
        added, removed = _split(last)
        return BlockChanges(
            self.epoch, self.version, self.block_tokens, False, added, removed, self.capacity
        )


def _split(last: dict[int, bool]) -> tuple[list[int], list[int]]:
    """Blocks held and not held, as their last change left them."""
    return [h for h, held in last.items() if held], [h for h, held in last.items() if not held]


def _salt(event: Any) -> str | None:
    """The ``cache_salt`` of a chain's first block: a string among its extra keys."""
    keys = getattr(event, "extra_keys", None)
    first = keys[0] if keys else None
    for key in first or ():
        if isinstance(key, str):
            return key
    return None
