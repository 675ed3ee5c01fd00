"""The latest a decode engine may start reading a prefill's NIXL blocks, enforced where
the read starts.

Prefill keeps the blocks under a lease (``transport.kv_lease_s``); once it runs out,
prefill frees them and may reuse them for another prompt. A read that starts after that
copies someone else's KV without any error, and decode caches it under this prompt's
hash. Decode's engine renews the lease by heartbeats, but vLLM 0.32 sends them on one
timer every ``kv_lease_s // 6`` s, only while the engine steps, and only once it has met
the prefill engine. So the replica puts a deadline into the request's KV parameters
(:data:`READ_BY`, wall clock: the ingress's prefill result time plus the lease, less the
heartbeat interval and a margin), and the decode engine's connector
(:class:`app.kv.timed_nixl.TimedNixlConnector`) checks it when the read is
about to start, after the request waited in the engine's queue:

- a read past its deadline is refused: the engine request fails as any failed KV load
  does (``finish_reason`` "error"), the blocks are never touched, and prefill's lease
  frees them;
- the connector remembers the refusal (:class:`RefusedReads`), and the replica asks for
  it (:data:`METHOD`, through the engine's ``collective_rpc``), so the attempt is
  reported as ``kv_expired`` and the request goes to the next transport.

A refusal is conservative: a request that waited past its deadline in a stepping engine
may still have had its lease renewed. It then costs a recompute, never a wrong answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from app.kv.peer_fence import PeerFenceWorker

# The keys in a decode request's kv_transfer_params: read no later than this (time.time()),
# and the replica's id for the request (vLLM's engine keys it by another, suffixed one).
READ_BY = "splitserve_read_by"
READER = "splitserve_reader"
METHOD = "splitserve_refused_reads"
EXTENSION = f"{__name__}.DecodeWorkerCalls"  # the qualified name vLLM resolves

_REMEMBERED = 4096  # refusals kept for the replica to ask about


def late_reads(deadlines: Mapping[str, float], awaiting: Iterable[str], now: float) -> list[str]:
    """The reads among ``awaiting`` (request ids whose blocks are to be pulled) whose
    deadline has passed at ``now``; a request without a deadline is never late."""
    return [rid for rid in awaiting if rid in deadlines and now >= deadlines[rid]]


class RefusedReads:
    """The request ids whose read a connector refused, the latest few thousand."""

    def __init__(self, keep: int = _REMEMBERED) -> None:
        self.keep = keep
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, request_id: str) -> None:
        self._ids[request_id] = None
        while len(self._ids) > self.keep:
            self._ids.popitem(last=False)

    def take(self, request_ids: Iterable[str]) -> list[str]:
        """Which of ``request_ids`` were refused (each answered once, then forgotten)."""
        return [rid for rid in request_ids if self._ids.pop(rid, 0) is None]


def refused_reads(connector: Any) -> RefusedReads | None:
    found = getattr(connector, "refused_reads", None)
    return found if isinstance(found, RefusedReads) else None


class ReadDeadlineWorker:
    """Mixed into vLLM's worker class by ``worker_extension_cls`` (decode engines)."""

    def splitserve_refused_reads(self, request_ids: list[str]) -> list[str]:
        from app.kv.lease_release import nixl_connector

        refused = refused_reads(nixl_connector())
        return refused.take(request_ids) if refused is not None else []


class DecodeWorkerCalls(ReadDeadlineWorker, PeerFenceWorker):
    """Every call the decode replica makes into its engine's worker (one class: vLLM
    takes one ``worker_extension_cls``)."""
