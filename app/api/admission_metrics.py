"""Refusals at the ingress in Ray's metrics (``splitserve_admission_rejected_total``).

Labelled with the Serve ``application`` and the ``reason`` (:class:`app.api.admission.Reason`);
every reason is exported at 0 from the start.
"""

from __future__ import annotations

from app.api.admission import Reason
from app.observability.metric_zero import start_at_zero


class RayAdmissionMetrics:
    """Call :meth:`refused` once per refused request."""

    def __init__(self, application: str = "") -> None:
        from ray.util import metrics

        self._rejected = metrics.Counter(
            "splitserve_admission_rejected",
            description="Requests the ingress refused with 503 and Retry-After, by reason: "
            "not_ready (a pool has no warm replica yet), max_waiting, oldest_wait, "
            "predicted_wait, pool_queue_full.",
            tag_keys=("reason", "application"),
        )
        self._rejected.set_default_tags({"application": application})
        start_at_zero(self._rejected, ({"reason": reason.value} for reason in Reason))

    def refused(self, reason: Reason) -> None:
        self._rejected.inc(1, tags={"reason": reason.value})
