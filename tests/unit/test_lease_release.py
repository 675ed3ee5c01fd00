"""Ending a prefill's NIXL send leases at once; calls routed to the replica they name."""

from types import SimpleNamespace
from typing import Any

from app.kv.lease_release import Release, end_leases
from app.pool.records import GenerateRequest, KvRelease
from deployments.request_routers import pinned_ranks


def test_end_leases_expires_known_requests_only():
    worker = SimpleNamespace(
        _reqs_to_send={"held": 1e12, "other": 1e12},
        _reqs_to_process={"held", "other", "just-prefilled"},
    )
    outcome = end_leases(worker, ["held", "just-prefilled", "read-already"])
    assert outcome == {
        "held": Release.RELEASED,
        "just-prefilled": Release.PENDING,  # its lease not yet known to the worker
        "read-already": Release.UNKNOWN,
    }
    # Its lease now ends (vLLM's next step frees it); another request's is untouched.
    assert worker._reqs_to_send == {"held": 0.0, "other": 1e12}


def _pending(*args: object) -> Any:
    return SimpleNamespace(args=args)


def _replica(unique_id):
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=unique_id))


def test_a_release_goes_to_the_replica_it_names():
    a, b = _replica("a"), _replica("b")
    release = _pending(KvRelease("b", {"remote_request_id": "r"}))
    assert pinned_ranks(release, [a, b]) == [[b]]
    # That replica gone: any may take it (it finds nothing to free).
    assert pinned_ranks(release, [a]) == [[a]]
    # So does a warm-up's request that names its replica.
    assert pinned_ranks(_pending(GenerateRequest("w", [1], None, replica="a")), [a, b]) == [[a]]
    # Any other call is left to the routing policy.
    generate = _pending(GenerateRequest("r", [1], None))
    assert pinned_ranks(generate, [a, b]) is None
    assert pinned_ranks(None, [a, b]) is None
