"""Freeing a prefill engine's NIXL blocks at once when the decode attempt that was to read
them has ended without reading them.

vLLM's producer side frees a finished prefill's blocks when the consumer notifies it (the
read is done) or when the request's lease (``transport.kv_lease_s``) runs out; it has no
call to abort a finished producer request. A failed attempt (the decode replica could
not read, timed out, was never reached, or the client left) would hold them for the
whole lease. :class:`KvLeaseRelease` is a vLLM worker extension (``worker_extension_cls``)
on prefill engines: :meth:`splitserve_release_kv`, called through the engine's
``collective_rpc``, ends the named requests' leases now, so the worker's next step hands
the blocks back to the scheduler exactly as an expired lease does (vLLM logs and counts
it as one).

Call it only once the decode attempt has ended (its engine request finished or aborted):
a read still in flight would read blocks that may be reused.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

METHOD = "splitserve_release_kv"
HELD = "splitserve_held_leases"
EXTENSION = f"{__name__}.KvLeaseRelease"  # the qualified name vLLM resolves


class Release(StrEnum):
    RELEASED = "released"  # its lease now ends: freed at the worker's next step
    PENDING = "pending"  # prefilled, but its lease is not yet known to the worker: ask again
    UNKNOWN = "unknown"  # nothing held under that id: read, expired or released already


def end_leases(worker: Any, request_ids: list[str]) -> dict[str, Release]:
    """End the send leases of ``request_ids`` on a NIXL connector ``worker`` (its
    ``_reqs_to_send``: request id -> lease expiry on ``time.perf_counter``'s clock)."""
    to_send: dict[str, float] = worker._reqs_to_send
    to_process: set[str] = worker._reqs_to_process
    outcome: dict[str, Release] = {}
    for request_id in request_ids:
        if request_id in to_send:
            to_send[request_id] = 0.0
            outcome[request_id] = Release.RELEASED
        elif request_id in to_process:
            outcome[request_id] = Release.PENDING
        else:
            outcome[request_id] = Release.UNKNOWN
    return outcome


def nixl_connector() -> Any:
    """This engine process's NIXL connector (inside a MultiConnector or not), or None."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPullConnector

    if not has_kv_transfer_group():
        return None
    group = get_kv_transfer_group()
    for connector in [group, *getattr(group, "sub_connectors", ())]:
        if isinstance(connector, NixlPullConnector):
            return connector
    return None


def nixl_worker() -> Any:
    """This engine process's NIXL connector worker, or None."""
    connector = nixl_connector()
    return None if connector is None else connector.connector_worker


def held_leases(worker: Any) -> int:
    """How many requests' blocks a NIXL connector ``worker`` keeps for decode to pull
    (leased, or prefilled and about to be)."""
    return len(set(worker._reqs_to_send) | set(worker._reqs_to_process))


class KvLeaseRelease:
    """Mixed into vLLM's worker class by ``worker_extension_cls`` (prefill engines)."""

    def splitserve_held_leases(self) -> int:
        worker = nixl_worker()
        return 0 if worker is None else held_leases(worker)

    def splitserve_release_kv(self, request_ids: list[str]) -> dict[str, str]:
        worker = nixl_worker()
        if worker is None:
            return {request_id: Release.UNKNOWN.value for request_id in request_ids}
        return {k: v.value for k, v in end_leases(worker, request_ids).items()}
