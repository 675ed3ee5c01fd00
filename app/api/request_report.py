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


def splitserve_field(timings: list[RequestTimings]) -> dict[str, Any]:
    """The first engine request's report; with several (``n`` > 1, a batch of prompts),
    ``requests`` lists each of them in order."""
    field = timing_report(timings[0])
    if len(timings) > 1:
        field["requests"] = [timing_report(t) for t in timings]
    return field
