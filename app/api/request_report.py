"""The ``splitserve`` field of a response: server-side timings and how the KV moved."""

from __future__ import annotations

from typing import Any

from app.flow.request_timings import RequestTimings


def timing_report(t: RequestTimings) -> dict[str, Any]:
    """One engine request's timings (milliseconds) and transfer."""
    report = t.transfer
    transport = report.transport
    local = not report.remote_prefill
    return {
        "disaggregated": t.disaggregated,
        "decision": report.decision_reason or None,
        "prefill_engine": t.prefill_engine or None,
        "prefill_cached_tokens": t.prefill_cached_tokens,
        # What the prefix router expected the replica to hold (a wrong guess if more
        # than the engine found: usage.prompt_tokens_details.cached_tokens).
        "routed_cached_tokens": t.routed_cached_tokens,
        "decode_engine": t.decode_engine or None,
        "ttft_ms": _ms(t.first_token_s),
        "ingress_ms": _ms(t.ingress_s),
        "prefill_queue_ms": _ms(t.prefill_queue_s),
        "prefill_ms": _ms(t.prefill_s),
        # "local": prefilled on decode by choice, so no KV moved (not a transport).
        "kv_transport": transport.value if transport else "local" if local else None,
        "kv_bytes": report.kv_bytes,
        "kv_fetch_ms": _ms(t.kv_fetch_s),
        "decode_queue_ms": _ms(t.decode_queue_s),
        "decode_first_token_ms": _ms(t.decode_first_token_s),
        # Where the client's first token was sampled (app.flow.first_token).
        "first_token_from": "prefill" if report.first_token_on_prefill else "decode",
        "fallbacks": [
            {
                "transport": a.transport.value,
                "kind": a.failure.kind.value,
                "reason": a.failure.message,
            }
            for a in report.fallbacks
            if a.failure is not None
        ],
        # Each move of the stream to another replica (app.flow.migration), in order.
        "migrations": [
            {
                "cause": m.cause.value,
                "tokens_sent": m.tokens_sent,
                "from_engine": m.engine_id or None,
                "reason": m.detail,
            }
            for m in t.migrations
        ],
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


# What the field keeps without ``ingress.report_internals``: how the request was served,
# and when; not which engine, what its caches held (a cross-tenant prefix-cache oracle),
# how many bytes moved, or internal failure text.
PUBLIC = (
    "disaggregated",
    "ttft_ms",
    "kv_transport",
    "first_token_from",
)


def splitserve_field(timings: list[RequestTimings], internals: bool = True) -> dict[str, Any]:
    """The first engine request's report; with several (``n`` > 1, a batch of prompts),
    ``requests`` lists each of them in order. Without ``internals``, only the public
    part (:data:`PUBLIC`, and each fallback's and move's kind)."""
    report = timing_report if internals else public_report
    field = report(timings[0])
    if len(timings) > 1:
        field["requests"] = [report(t) for t in timings]
    return field


def public_report(t: RequestTimings) -> dict[str, Any]:
    """:func:`timing_report` less the server's internals."""
    full = timing_report(t)
    field = {name: full[name] for name in PUBLIC}
    field["fallbacks"] = [
        {"transport": f["transport"], "kind": f["kind"]} for f in full["fallbacks"]
    ]
    field["migrations"] = [{"cause": m["cause"]} for m in full["migrations"]]
    return field
