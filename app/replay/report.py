"""One replay's figures, each stated with the window and scales it was measured under."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from app.replay.client import Answer
from app.replay.slo import Slo, attainment, fluidity_index, meets
from app.replay.trace import Window


def percentiles_ms(values: Sequence[float]) -> dict[str, float | None]:
    """p50 / p95 / p99 in milliseconds (nearest rank); None for no values."""
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99)}


def refusal(body: str) -> str:
    """A 503's reason, its figures blanked (``#``), so that refusals for one reason count
    together: the error's ``message`` where the body is an OpenAI error."""
    try:
        message = str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = body
    return re.sub(r"\d+(\.\d+)?", "#", message)[:120]


def outcome(answer: Answer) -> str:
    """How a request ended, as the reports count it: its HTTP status, ``error event`` (a
    200 stream that carried an error), or ``no answer``."""
    if answer.status == 200 and answer.error:
        return "error event"
    return str(answer.status or "no answer")


def engine_counts(answered: Sequence[Answer]) -> dict[str, int]:
    """How many answers each engine decoded, where the server reported it (splitserve's
    ``report_internals``); empty where none did."""
    return dict(Counter(a.engine for a in answered if a.engine))


def summary(answers: Sequence[Answer], window: Window, slo: Slo) -> dict[str, Any]:
    """Counts, latencies, attainment, fluidity-index and goodput of a replay."""
    answered = [a for a in answers if a.answered]
    statuses = Counter(outcome(a) for a in answers)
    outcomes = [(a.ttft_s, a.tpot_s) if a.answered else (None, None) for a in answers]
    streams = [(a.token_times_s if a.answered else [], a.output_tokens) for a in answers]
    span_s = window.duration_s / window.rate_scale
    met = sum(meets(ttft, tpot, slo) for ttft, tpot in outcomes)
    return {
        "window": window.stated(),
        "slo": {"ttft_ms": slo.ttft_s * 1000, "tpot_ms": slo.tpot_s * 1000},
        "requests": len(answers),
        "answered": len(answered),
        "statuses": dict(statuses),
        "ttft_ms": percentiles_ms([a.ttft_s for a in answered if a.ttft_s is not None]),
        "tpot_ms": percentiles_ms([a.tpot_s for a in answered if a.tpot_s is not None]),
        "slo_attainment": round(attainment(outcomes, slo), 4),
        "fluidity_index": round(fluidity_index(streams, slo), 4),
        "goodput_rps": round(met / span_s, 3),
        "paths": dict(Counter(a.path or "unknown" for a in answered)),
        "engines": engine_counts(answered),
        "refusals": dict(Counter(refusal(a.error) for a in answers if a.status == 503)),
        "send_lag_ms": percentiles_ms([a.send_lag_s for a in answers]),
    }
