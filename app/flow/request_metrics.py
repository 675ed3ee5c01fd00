"""Server-side per-request timings as Ray/Prometheus histograms (``ray_splitserve_*``).

Recorded by the ingress when a request completes: queue + prefill, KV transfer, the decode
replica's first token, TTFT and its stages, and end-to-end time; and as each stream goes,
every inter-token gap (ITL), so that a long answer's gaps are not recorded in one burst
of histogram calls at its end (each call costs about 5 us). All are labelled by whether
the request was disaggregated and by Serve ``application``.
They show in the Ray dashboard's metrics view and in Grafana through Ray's Prometheus
export.
"""

from __future__ import annotations

from app.flow.migration import LostCause
from app.flow.request_timings import RequestTimings
from app.observability.metric_zero import start_at_zero

_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]


class RayRequestMetrics:
    """Histograms in Ray's metrics system; call :meth:`record` once per completed request,
    :meth:`unfinished` once per request that failed or was cancelled."""

    def __init__(self, application: str = "") -> None:
        from ray.util import metrics

        def histogram(
            name: str, description: str, tags: tuple[str, ...] = ("path",)
        ) -> metrics.Histogram:
            made = metrics.Histogram(
                name,
                description=description,
                boundaries=_BUCKETS,
                tag_keys=(*tags, "application"),
            )
            made.set_default_tags({"application": application})
            return made

        self._prefill = histogram(
            "splitserve_prefill_seconds", "Prefill pool call: queueing and prefill."
        )
        self._decode_first = histogram(
            "splitserve_decode_first_token_seconds",
            "Decode call to its first token (includes pulling the KV).",
        )
        self._ttft = histogram("splitserve_ttft_seconds", "Server-side time to first token.")
        self._stage = histogram(
            "splitserve_ttft_stage_seconds",
            "Time to first token by stage: ingress (arrival to the pools being asked), "
            "prefill_queue, prefill, decode_queue, kv_transfer, "
            "first_decode_step (the decode replica's first step, after the KV read; on the "
            "local path it includes the prefill).",
            ("path", "stage"),
        )
        self._itl = histogram(
            "splitserve_itl_seconds",
            "Server-side gap between token chunks, recorded as each is streamed (a "
            "request that fails later keeps its gaps): with stream batching "
            "(stream_interval_ms), the batching interval, not a per-token latency.",
        )
        self._path_tags = {True: {"path": "disaggregated"}, False: {"path": "local"}}
        self._e2e = histogram("splitserve_e2e_seconds", "Server-side request duration.")
        self._unfinished = histogram(
            "splitserve_unfinished_seconds",
            "Server-side duration of requests that did not complete, by how they ended: "
            "failed, or cancelled (the client left, or the deadline passed). The other "
            "histograms count completed requests only.",
            ("outcome",),
        )
        self._migrations = metrics.Counter(
            "splitserve_migrations",
            description="Streams moved to another decode replica after theirs was lost, "
            "by cause: replica_died, engine_died, stream_stalled.",
            tag_keys=("cause", "application"),
        )
        self._migrations.set_default_tags({"application": application})
        start_at_zero(self._migrations, ({"cause": cause.value} for cause in LostCause))

    def unfinished(self, timings: RequestTimings, outcome: str) -> None:
        """A request that did not complete: its duration, by how it ended, and the moves
        it took (a stream moved and then failed is the case operators most need to see)."""
        self._unfinished.observe(timings.total_s, tags={"outcome": outcome})
        self._count_migrations(timings)

    def token_gap(self, seconds: float, disaggregated: bool) -> None:
        """One gap between chunks of a stream, as it is streamed."""
        self._itl.observe(seconds, tags=self._path_tags[disaggregated])

    def record(self, timings: RequestTimings) -> None:
        tags = self._path_tags[timings.disaggregated]
        if timings.disaggregated:
            self._prefill.observe(timings.prefill_s, tags=tags)
        if timings.decode_first_token_s:
            self._decode_first.observe(timings.decode_first_token_s, tags=tags)
        self._ttft.observe(timings.first_token_s, tags=tags)
        for stage, seconds in ttft_stages(timings).items():
            self._stage.observe(seconds, tags={**tags, "stage": stage})
        self._e2e.observe(timings.total_s, tags=tags)
        self._count_migrations(timings)

    def _count_migrations(self, timings: RequestTimings) -> None:
        for migration in timings.migrations:
            self._migrations.inc(1, tags={"cause": migration.cause.value})


def ttft_stages(timings: RequestTimings) -> dict[str, float]:
    """Seconds of the request's time to first token spent in each stage it went through.

    Where the first token came from the prefill (app.flow.first_token), the hand-off and
    decode's stages come after it and are no part of its TTFT.
    """
    stages = {"ingress": timings.ingress_s}
    if timings.disaggregated:
        stages["prefill_queue"] = timings.prefill_queue_s
        stages["prefill"] = timings.prefill_s
        if timings.transfer.first_token_on_prefill:
            return stages
        stages["kv_transfer"] = timings.kv_fetch_s
    stages["decode_queue"] = timings.decode_queue_s
    if timings.decode_first_token_s:
        stages["first_decode_step"] = max(0.0, timings.decode_first_token_s - timings.kv_fetch_s)
    return stages
