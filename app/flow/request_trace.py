"""A request's stages as spans under its trace's root (:mod:`app.observability.tracing`).

Recorded when the request ends, from what :class:`RequestTimings` measured, each stage
placed on the request's own clock (the flow runs them in this order):

- ``ingress``: from the HTTP request's arrival to the pools being asked (parsing, vLLM's
  request processing, admission);
- ``route``: the remote-or-local decision (``splitserve.decision``, ``splitserve.reason``);
- ``prefill`` (a remote prefill): Serve's queue and the prefill on its engine;
- ``kv_transfer`` (a remote prefill): the transport that served it, the KV bytes, the path
  the attempts took (``nixl>object_store``) and each fallback's reason; an error status
  when no transport served the request;
- ``decode``: from the hand-off (or, local, from the start) to the request's end, with
  each migration to another replica as an event.
"""

from __future__ import annotations

from typing import Any

from app.flow.request_timings import RequestTimings
from app.observability.tracing import RequestSpan

NS = 1_000_000_000


def record(
    span: RequestSpan,
    timings: RequestTimings,
    started_ns: int,
    ended_ns: int,
    sample: int = 0,
    error: str | None = None,
) -> None:
    """The stages of one engine request (``sample`` of the HTTP request's ``n``) that ran
    from ``started_ns`` to ``ended_ns`` (Unix nanoseconds), under ``span``."""
    base = {"splitserve.sample": sample}
    report = timings.transfer
    span.child("ingress", started_ns - int(timings.ingress_s * NS), started_ns, base)
    remote = report.remote_prefill and bool(report.attempts)
    decision = "remote" if remote else "local"
    span.child(
        "route",
        started_ns,
        started_ns,
        {**base, "splitserve.decision": decision, "splitserve.reason": report.decision_reason},
    )
    decode_from = started_ns
    if remote:
        prefill_end = started_ns + int((timings.prefill_queue_s + timings.prefill_s) * NS)
        span.child(
            "prefill",
            started_ns,
            prefill_end,
            {
                **base,
                "splitserve.engine": timings.prefill_engine,
                "splitserve.queue_s": timings.prefill_queue_s,
                "splitserve.cached_tokens": timings.prefill_cached_tokens,
                "splitserve.first_token_on_prefill": report.first_token_on_prefill,
            },
        )
        transfer_start = prefill_end + int(timings.decode_queue_s * NS)
        served = report.transport
        attributes: dict[str, Any] = {
            **base,
            "splitserve.transport": served.value if served else "none",
            "splitserve.kv_bytes": report.kv_bytes,
            "splitserve.path": ">".join(a.transport.value for a in report.attempts),
            "splitserve.fallbacks": [
                f"{a.transport.value}:{a.failure.kind.value}"
                for a in report.fallbacks
                if a.failure is not None
            ],
        }
        span.child(
            "kv_transfer",
            transfer_start,
            transfer_start + int(report.transfer_s * NS),
            attributes,
            error="no transport served the request" if report.unserved else None,
        )
        decode_from = prefill_end
    span.child(
        "decode",
        decode_from,
        ended_ns,
        {
            **base,
            "splitserve.engine": timings.decode_engine,
            "splitserve.queue_s": timings.decode_queue_s,
            "splitserve.prompt_tokens": timings.prompt_tokens,
            "splitserve.output_tokens": timings.output_tokens,
            "splitserve.migrations": len(timings.migrations),
        },
        events=[
            (
                "migration",
                {
                    "splitserve.cause": m.cause.value,
                    "splitserve.tokens_sent": m.tokens_sent,
                    "splitserve.from_engine": m.engine_id,
                },
            )
            for m in timings.migrations
        ],
        error=error,
    )
