"""Server-side per-request timings as Ray/Prometheus histograms (``ray_splitserve_*``).

Recorded by the ingress when a request completes: queue + prefill, KV transfer, the decode
replica's first token, TTFT, every inter-token gap (ITL) and end-to-end time, labelled by
whether the request was disaggregated. They show in the Ray dashboard's metrics view and
in Grafana through Ray's Prometheus export.
"""

from __future__ import annotations

from app.orchestrator import RequestTimings

_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]


class RayRequestMetrics:
    """Histograms in Ray's metrics system; call :meth:`record` once per completed request."""

    def __init__(self) -> None:
        from ray.util import metrics

        def histogram(name: str, description: str) -> metrics.Histogram:
            return metrics.Histogram(
                name, description=description, boundaries=_BUCKETS, tag_keys=("path",)
            )

        self._prefill = histogram(
            "splitserve_prefill_seconds", "Prefill pool call: queueing and prefill."
        )
        self._decode_first = histogram(
            "splitserve_decode_first_token_seconds",
            "Decode call to its first token (includes pulling the KV).",
        )
        self._ttft = histogram("splitserve_ttft_seconds", "Server-side time to first token.")
        self._itl = histogram("splitserve_itl_seconds", "Server-side gap between token chunks.")
        self._e2e = histogram("splitserve_e2e_seconds", "Server-side request duration.")

    def record(self, timings: RequestTimings) -> None:
        tags = {"path": "disaggregated" if timings.disaggregated else "local"}
        if timings.disaggregated:
            self._prefill.observe(timings.prefill_s, tags=tags)
        if timings.decode_first_token_s:
            self._decode_first.observe(timings.decode_first_token_s, tags=tags)
        self._ttft.observe(timings.first_token_s, tags=tags)
        for gap in timings.token_gaps_s:
            self._itl.observe(gap, tags=tags)
        self._e2e.observe(timings.total_s, tags=tags)
