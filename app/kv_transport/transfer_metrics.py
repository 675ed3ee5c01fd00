"""Ray/Prometheus metrics for KV transfers (exported by Ray's metrics agent, so they show
in the Ray dashboard and in Grafana as ``ray_splitserve_kv_*``).

Recorded by the ingress once per disaggregated request, from its :class:`TransferReport`:
which transport served it, bytes and seconds of the transfer, and each fallback taken
with its reason.
"""

from __future__ import annotations

from typing import Any

from app.kv_transport.fallback import TransferReport

_SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]


def _reason_kind(reason: str | None) -> str:
    """A low-cardinality label for a fallback reason (the full text goes to the log)."""
    if not reason:
        return "unknown"
    if reason.startswith("prefill failed"):
        return "prefill_failed"
    if reason.startswith("object store"):
        return "object_store_get_failed"
    if "could not load" in reason:
        return "engine_load_failed"
    return "other"


class RayTransferMetrics:
    """Counters and a histogram in Ray's metrics system; call :meth:`record` per request."""

    def __init__(self) -> None:
        from ray.util import metrics

        self._requests = metrics.Counter(
            "splitserve_kv_transfers",
            description="Disaggregated requests by the transport that served their KV.",
            tag_keys=("transport",),
        )
        self._bytes = metrics.Counter(
            "splitserve_kv_transfer_bytes",
            description="KV bytes moved from prefill to decode.",
            tag_keys=("transport",),
        )
        self._seconds = metrics.Histogram(
            "splitserve_kv_transfer_seconds",
            description="Time to move one request's KV (object store: put + get; NIXL: "
            "see vllm:nixl_xfer_time_seconds on the decode replicas).",
            boundaries=_SECONDS_BUCKETS,
            tag_keys=("transport",),
        )
        self._decisions = metrics.Counter(
            "splitserve_disaggregation_decisions",
            description="Per-request choice of remote prefill or local prefill on decode.",
            tag_keys=("decision", "reason"),
        )
        self._fallbacks = metrics.Counter(
            "splitserve_kv_fallbacks",
            description="Transfers that failed and fell back to the next transport.",
            tag_keys=("transport", "reason"),
        )

    def record(self, report: TransferReport) -> None:
        transport = report.transport
        self._decisions.inc(
            1,
            tags={
                "decision": "remote" if report.remote_prefill else "local",
                "reason": report.decision_reason or "unknown",
            },
        )
        for attempt in report.fallbacks:
            self._fallbacks.inc(
                1,
                tags={"transport": attempt.transport.value, "reason": _reason_kind(attempt.reason)},
            )
        if transport is None:
            return
        tags: dict[str, Any] = {"transport": transport.value}
        self._requests.inc(1, tags=tags)
        if report.kv_bytes:
            self._bytes.inc(report.kv_bytes, tags=tags)
        if report.transfer_s:
            self._seconds.observe(report.transfer_s, tags=tags)
