"""Ray/Prometheus metrics for KV transfers (exported by Ray's metrics agent, so they show
in the Ray dashboard and in Grafana as ``ray_splitserve_kv_*``).

Labelled with the Serve ``application``. Recorded by the ingress once per disaggregated
request, from its :class:`TransferReport`: whether it was prefilled remotely or locally
(and why), which transport served it, bytes and seconds of the transfer, each fallback
taken with its kind (a :class:`~app.kv.failure.FailureKind`), and requests no
transport served.
A local prefill moves no KV, so it counts only as a decision, never as a transport.
"""

from __future__ import annotations

from typing import Any

from app.flow.disaggregation import LOCAL_REASONS, REMOTE_REASONS
from app.kv.failure import FailureKind
from app.kv.fallback import TransferReport, Transport
from app.observability.metric_zero import start_at_zero

_SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]


# How an early free of NIXL blocks ended: app.kv.lease_release.Release's values,
# or "failed" when the call to the prefill replica did not answer.
RELEASE_OUTCOMES = ("released", "unknown", "pending", "failed")


class RayTransferMetrics:
    """Counters and a histogram in Ray's metrics system; call :meth:`record` per request."""

    def __init__(
        self, application: str = "", plan: tuple[Transport, ...] = tuple(Transport)
    ) -> None:
        from ray.util import metrics

        self._requests = metrics.Counter(
            "splitserve_kv_transfers",
            description="Disaggregated requests by the transport that served their KV.",
            tag_keys=("transport", "application"),
        )
        self._bytes = metrics.Counter(
            "splitserve_kv_transfer_bytes",
            description="KV bytes moved from prefill to decode.",
            tag_keys=("transport", "application"),
        )
        self._seconds = metrics.Histogram(
            "splitserve_kv_transfer_seconds",
            description="Time to move one request's KV (object store: put + get; NIXL: "
            "from the decode engine's allocation of its blocks to the read's end).",
            boundaries=_SECONDS_BUCKETS,
            tag_keys=("transport", "application"),
        )
        self._decisions = metrics.Counter(
            "splitserve_disaggregation_decisions",
            description="Per-request choice of remote prefill or local prefill on decode.",
            tag_keys=("decision", "reason", "application"),
        )
        self._fallbacks = metrics.Counter(
            "splitserve_kv_fallbacks",
            description="Transfer attempts that failed, by transport and failure kind.",
            tag_keys=("transport", "reason", "application"),
        )
        self._unserved = metrics.Counter(
            "splitserve_kv_unserved",
            description="Remote-prefill requests no transport served (recompute included): "
            "they ended in an error.",
            tag_keys=("application",),
        )
        self._releases = metrics.Counter(
            "splitserve_kv_releases",
            description="Early frees of a failed attempt's NIXL blocks on prefill, by "
            "outcome: released, unknown (already read, expired or released), pending "
            "(not yet leased; the lease frees them), failed (the call did not answer).",
            tag_keys=("outcome", "application"),
        )
        for metric in (
            self._requests,
            self._bytes,
            self._seconds,
            self._decisions,
            self._fallbacks,
            self._unserved,
            self._releases,
        ):
            metric.set_default_tags({"application": application})
        # Every series a dashboard reads exists from the first export, at 0 (the plan's
        # transports, every failure kind, the decisions; app.observability.metric_zero).
        served = [{"transport": t.value} for t in plan]
        start_at_zero(self._requests, served)
        start_at_zero(self._bytes, served)
        start_at_zero(
            self._fallbacks,
            ({"transport": t.value, "reason": kind.value} for t in plan for kind in FailureKind),
        )
        start_at_zero(self._unserved)
        start_at_zero(self._releases, ({"outcome": o} for o in RELEASE_OUTCOMES))
        start_at_zero(
            self._decisions,
            [{"decision": "remote", "reason": reason} for reason in REMOTE_REASONS]
            + [{"decision": "local", "reason": reason} for reason in LOCAL_REASONS],
        )

    def released(self, outcome: str) -> None:
        """One early free of NIXL blocks and how it ended (:data:`RELEASE_OUTCOMES`)."""
        self._releases.inc(1, tags={"outcome": outcome})

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
            assert attempt.failure is not None
            tags = {"transport": attempt.transport.value, "reason": attempt.failure.kind.value}
            self._fallbacks.inc(1, tags=tags)
        if report.unserved:
            self._unserved.inc(1)
        if transport is None:
            return
        served: dict[str, Any] = {"transport": transport.value}
        self._requests.inc(1, tags=served)
        if report.kv_bytes:
            self._bytes.inc(report.kv_bytes, tags=served)
        if report.transfer_s:
            self._seconds.observe(report.transfer_s, tags=served)
