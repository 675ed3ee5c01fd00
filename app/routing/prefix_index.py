"""The router's exact prefix index: per engine replica, the blocks its prefix cache
holds, as its KV events said (:mod:`app.routing.engine_blocks`), read by the ingress.

The ingress reads each replica's changes as they happen (a long poll,
``deployments.prefix_index_reader``); until a read shows them, a request just routed to a
replica will store its prompt there, so :meth:`PrefixIndex.routed` keeps its blocks as
*expected* on that replica for ``expect_s`` (the next read confirms them, or an eviction
event removes them). A replica's blocks are dropped when it leaves the pool
(:meth:`retain`), and replaced wholesale when it reports another epoch (an engine that
lost events and started over).

**Blocks about to be evicted.** A read can be exact and still wrong by the time the
request reaches the engine: the requests routed there just before it store blocks the
cache must make room for, and a full cache evicts its least recently used blocks for
them, the very blocks a returning conversation comes back for. So each replica's held
blocks are kept in use order (stored, or routed again: :meth:`PrefixIndex.routed`
touches them) and, where the engine reports its size (``capacity``), a held block among
the oldest ``held + coming - capacity`` does not count as matched, ``coming`` being the
blocks expected there and not yet held, and the blocks the requests just routed there
take beyond their prompts' whole blocks (the partial last one, the answer's first). The
engine's own order is by when each block was freed; the index's by when it was stored
or routed, which is close where requests take about as long.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice

from app.routing.engine_blocks import BlockChanges

EXPECT_S = 2.0  # a routed request's blocks count as held this long before a read shows them
MAX_EXPECTED = 65536  # expected blocks kept per replica


@dataclass
class _Replica:
    epoch: str | None = None
    version: int = 0
    held: OrderedDict[int, None] = field(default_factory=OrderedDict)  # oldest use first
    expected: OrderedDict[int, float] = field(default_factory=OrderedDict)  # hash -> until
    capacity: int = 0  # the engine's KV blocks (0: not reported)
    # Blocks the requests routed here take beyond their prompts' whole blocks (the last,
    # partial one and the answer's first), never cached while they run: (until, blocks).
    running: deque[tuple[float, int]] = field(default_factory=deque)

    def at_risk(self, now: float) -> set[int]:
        """The held blocks the blocks coming here would evict from a full cache: the
        ``held + coming - capacity`` least recently used."""
        if not self.capacity:
            return set()
        while self.running and self.running[0][0] <= now:
            self.running.popleft()
        # Expectations run out in the order they were made: drop those that have, so
        # that counting the rest costs what is in flight, not what was ever routed.
        while self.expected:
            oldest, until = next(iter(self.expected.items()))
            if until > now:
                break
            del self.expected[oldest]
        coming = sum(1 for value in self.expected if value not in self.held)
        coming += sum(blocks for _, blocks in self.running)
        evicted = len(self.held) + coming - self.capacity
        return set(islice(self.held, evicted)) if evicted > 0 else set()


class PrefixIndex:
    """The blocks each replica of one pool holds; thread-safe (Serve's routers may run
    on a loop thread of their own)."""

    def __init__(
        self, expect_s: float = EXPECT_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.expect_s = expect_s
        self.clock = clock
        self.block_tokens: int | None = None  # the engines' block, once a replica reported
        self._replicas: dict[str, _Replica] = {}
        self._live: set[str] = set()
        self._polls: dict[str, int] = {}  # the reader's questions in flight, by replica
        self._lock = threading.Lock()

    def live(self) -> list[str]:
        """The pool's replicas, as its router last saw them."""
        with self._lock:
            return sorted(self._live)

    def since(self, replica: str) -> tuple[str | None, int]:
        """What this index last read of ``replica``: (epoch, version)."""
        with self._lock:
            found = self._replicas.get(replica)
            return (found.epoch, found.version) if found else (None, 0)

    def update(self, replica: str, changes: BlockChanges) -> None:
        """Apply what ``replica`` reported (ignored once it has left the pool)."""
        with self._lock:
            if replica not in self._live:
                return
            self.block_tokens = changes.block_tokens
            state = self._replicas.setdefault(replica, _Replica())
            state.capacity = changes.capacity
            if changes.full:
                state.held = OrderedDict.fromkeys(changes.added)
            else:
                for gone in changes.removed:
                    state.held.pop(gone, None)
                for value in changes.added:  # each prompt's last block first
                    state.held[value] = None
                    state.held.move_to_end(value)
            for gone in changes.removed:
                state.expected.pop(gone, None)
            state.epoch, state.version = changes.epoch, changes.version

    def polling(self, replica: str, change: int) -> None:
        """The reader's question to ``replica`` started (+1) or ended (-1). Serve counts
        it in the replica's queue length while the replica holds it (up to the reader's
        wait), so the routers take it out (:meth:`requests_queued`): otherwise a replica
        whose cache just changed, whose question was answered and not yet asked again,
        looks the least loaded, and new prefixes follow the last one."""
        with self._lock:
            count = self._polls.get(replica, 0) + change
            if count > 0:
                self._polls[replica] = count
            else:
                self._polls.pop(replica, None)

    def requests_queued(self, replica: str, queue_len: int) -> int:
        """``replica``'s queue length as Serve counts it, less the reader's questions."""
        with self._lock:
            return max(0, queue_len - self._polls.get(replica, 0))

    def routed(self, replica: str, hashes: Sequence[int], more_blocks: int = 0) -> None:
        """A request of these blocks went to ``replica``: expect them there (those held
        are used again: the last its cache would evict). ``more_blocks``: the blocks it
        takes beyond them while it runs (its prompt's partial last block, its answer)."""
        until = self.clock() + self.expect_s
        with self._lock:
            state = self._replicas.setdefault(replica, _Replica())
            if more_blocks > 0:
                state.running.append((until, more_blocks))
            for value in hashes:
                state.expected[value] = until
                state.expected.move_to_end(value)
            for value in reversed(hashes):  # the last block the first to go, as stored
                if value in state.held:
                    state.held.move_to_end(value)
            while len(state.expected) > MAX_EXPECTED:
                state.expected.popitem(last=False)

    def matched_blocks(self, replica: str, hashes: Sequence[int]) -> int:
        """How many of ``hashes``, from the first, ``replica`` holds (or is expected to),
        less those its cache is about to evict (:meth:`_Replica.at_risk`)."""
        now = self.clock()
        with self._lock:
            state = self._replicas.get(replica)
            if state is None:
                return 0
            at_risk = state.at_risk(now)
            count = 0
            for value in hashes:
                expected = state.expected.get(value, 0.0) > now
                if not expected and (value not in state.held or value in at_risk):
                    break
                count += 1
            return count

    def replicas(self) -> list[str]:
        with self._lock:
            return list(self._replicas)

    def forget(self, replica: str) -> None:
        with self._lock:
            self._replicas.pop(replica, None)
            self._live.discard(replica)

    def retain(self, live: set[str]) -> None:
        """The pool's replicas are ``live``: forget the others (dead, scaled down,
        redeployed)."""
        with self._lock:
            self._live = set(live)
            for replica in [r for r in self._replicas if r not in live]:
                del self._replicas[replica]


_SHARED: dict[str, PrefixIndex] = {}
_SHARED_LOCK = threading.Lock()


def shared(pool: str) -> PrefixIndex:
    """This process's index of ``pool`` (the router that uses it and the reader that
    fills it run in the ingress's process)."""
    with _SHARED_LOCK:
        return _SHARED.setdefault(pool, PrefixIndex())
