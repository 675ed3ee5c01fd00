"""The ``splitserve`` field of a response: server-side timings and how the KV moved."""

from __future__ import annotations

from typing import Any

from app.orchestrator import RequestTimings


def timing_report(t: RequestTimings) -> dict[str, Any]:
    """One engine request's timings (milliseconds) and transfer."""
    report = t.transfer
    transport = report.transport
    return {
        "disaggregated": t.disaggregated,
        "decision": report.decision_reason or None,
        "prefill_engine": t.prefill_engine or None,
        "prefill_cached_tokens": t.prefill_cached_tokens,
        "decode_engine": t.decode_engine or None,
        "ttft_ms": round(t.first_token_s * 1000, 3),
        "prefill_ms": round(t.prefill_s * 1000, 3),
        "kv_transport": transport.value if transport else None,
        "kv_bytes": report.kv_bytes,
        "kv_fetch_ms": round(t.kv_fetch_s * 1000, 3),
        "decode_first_token_ms": round(t.decode_first_token_s * 1000, 3),
        "fallbacks": [
            {"transport": a.transport.value, "reason": a.reason} for a in report.fallbacks
        ],
    }


def splitserve_field(timings: list[RequestTimings]) -> dict[str, Any]:
    """The first engine request's report; with several (``n`` > 1, a batch of prompts),
    ``requests`` lists each of them in order."""
    field = timing_report(timings[0])
    if len(timings) > 1:
        field["requests"] = [timing_report(t) for t in timings]
    return field
