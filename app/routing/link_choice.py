"""The measured links in two choices: which decode replica a request's KV goes to, and
which transport a request tries first (the links: :mod:`app.observability.link_meter`).

Each decode replica reports with its routing stats the prefill replicas whose link into
it it has measured over NIXL (``nixl_links``) and those among them whose NIXL runs under
half the object store's rate on the same pair (``slow_links``: NIXL lost its fast path,
e.g. UCX fell back to TCP).

- Per pair, :func:`demote_slow_pairs`: a request whose KV a prefill replica holds for a
  NIXL read goes to a decode replica whose link from that prefill replica is not slow,
  where one is ranked; the slow ones stay as the last resort (a slow link still moves
  the KV, and a decode replica that holds the conversation may still be worth it).
- For the plan, :class:`LinkBook`: what the decode router last saw of every replica's
  links. The transport is chosen before the prefill, when the pair is not known yet, so
  the plan is ordered by every pair measured: where NIXL is slow on all of them, the
  object store comes first. Where only some pairs are slow, NIXL stays first and the
  decode choice above avoids them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from app.kv.fallback import Transport


def demote_slow_pairs(
    ranks: list[list[str]], stats: Mapping[str, Mapping[str, Any]], source: str
) -> list[list[str]]:
    """``ranks`` with each decode replica whose NIXL link from prefill replica ``source``
    is slow moved after all the others (their order kept)."""
    slow = {replica for replica, figures in stats.items() if source in _ids(figures, "slow_links")}
    if not slow:
        return ranks
    fast = [[r for r in rank if r not in slow] for rank in ranks]
    late = [[r for r in rank if r in slow] for rank in ranks]
    return [rank for rank in fast + late if rank]


class LinkBook:
    """The NIXL links every decode replica reported: which measured, which slow."""

    def __init__(self) -> None:
        self._measured: dict[str, frozenset[str]] = {}
        self._slow: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def update(self, decode: str, figures: Mapping[str, Any]) -> None:
        """Decode replica ``decode``'s routing stats, as the router last saw them."""
        with self._lock:
            self._measured[decode] = _ids(figures, "nixl_links")
            self._slow[decode] = _ids(figures, "slow_links")

    def retain(self, decodes: set[str]) -> None:
        """Forget the replicas that are gone."""
        with self._lock:
            for gone in set(self._measured) - decodes:
                self._measured.pop(gone, None)
                self._slow.pop(gone, None)

    def nixl_slow_everywhere(self) -> bool:
        """Whether NIXL was measured on some pair and is slow on every pair measured."""
        with self._lock:
            pairs = [(d, p) for d, prefills in self._measured.items() for p in prefills]
            return bool(pairs) and all(p in self._slow.get(d, ()) for d, p in pairs)

    def order(self, plan: tuple[Transport, ...]) -> tuple[Transport, ...]:
        """``plan``, with the object store before NIXL where NIXL is slow on every pair."""
        if Transport.NIXL not in plan or Transport.OBJECT_STORE not in plan:
            return plan
        if not self.nixl_slow_everywhere():
            return plan
        rest = [t for t in plan if t not in (Transport.NIXL, Transport.OBJECT_STORE)]
        return (Transport.OBJECT_STORE, Transport.NIXL, *rest)


def _ids(figures: Mapping[str, Any], key: str) -> frozenset[str]:
    value = figures.get(key) or ()
    if isinstance(value, str) or not isinstance(value, Sequence | set | frozenset):
        return frozenset()
    return frozenset(str(v) for v in value)


_SHARED: LinkBook | None = None
_SHARED_LOCK = threading.Lock()


def shared_link_book() -> LinkBook:
    """This process's book, made on first use (an ingress replica's decode router writes
    it, its orchestrator reads it)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = LinkBook()
        return _SHARED
