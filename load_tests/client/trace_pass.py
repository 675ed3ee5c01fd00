"""One pass of a trace replay against a running server, as the trace benchmark reads it:
the pass's counts, latencies, token gaps and each SLO profile's measures."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

from app.replay.client import Answer, replay
from app.replay.profiles import SloProfile
from app.replay.report import engine_counts, outcome, percentiles_ms, refusal
from app.replay.trace import TraceRequest


def token_gaps(times: list[float]) -> list[float]:
    """Gaps between the distinct times tokens arrived (one SSE event may carry several)."""
    distinct = sorted(set(times))
    return [b - a for a, b in itertools.pairwise(distinct)]


def _thinned(values: list[float], most: int = 2000) -> list[float]:
    ordered = sorted(values)
    step = max(1, len(ordered) // most)
    return [round(v * 1000, 2) for v in ordered[::step]]


def one_pass(
    url: str, requests: list[TraceRequest], seed: int, profiles: list[SloProfile], label: str
) -> dict[str, Any]:
    """Replay ``requests`` once; the pass's counts, latencies and each profile's measures."""
    answers: list[Answer] = asyncio.run(replay(url, "tiny-llama", requests, seed, progress=label))
    streams = [(a.token_times_s if a.answered else [], a.output_tokens) for a in answers]
    answered = [a for a in answers if a.answered]
    gaps = [g for a in answered for g in token_gaps(a.token_times_s)]
    ttfts = [a.ttft_s for a in answered if a.ttft_s is not None]
    measures = {}
    for profile in profiles:
        found = profile.measures(streams)
        measures[profile.name] = {**found, "margin": round(profile.margin(found), 4)}
    return {
        "prompt_seed": seed,
        "sent": sum(a.sent for a in answers),
        "answered": len(answered),
        "failed": len(answers) - len(answered),
        "statuses": dict(Counter(outcome(a) for a in answers if not a.answered)),
        "refusals": dict(Counter(refusal(a.error) for a in answers if a.status == 503)),
        "paths": dict(Counter(a.path or "unknown" for a in answered)),
        "engines": engine_counts(answered),
        "ttft_ms": percentiles_ms(ttfts),
        "tpot_ms": percentiles_ms([t for a in answered if (t := a.tpot_s) is not None]),
        "token_gap_ms": percentiles_ms(gaps),
        "send_lag_ms": percentiles_ms([a.send_lag_s for a in answers]),
        "profiles": measures,
        "ttft_samples_ms": _thinned(ttfts),
        "gap_samples_ms": _thinned(gaps),
    }


def brief(result: dict[str, Any]) -> str:
    measures = "; ".join(
        f"{name} {', '.join(f'{k} {v}' for k, v in m.items() if k != 'margin')}"
        for name, m in result["profiles"].items()
    )
    return (
        f"sent {result['sent']}, answered {result['answered']}, failed {result['failed']} "
        f"{result['statuses'] or ''}; TTFT p50/p99 {result['ttft_ms']['p50']}/"
        f"{result['ttft_ms']['p99']} ms, token gap p99 {result['token_gap_ms']['p99']} ms; "
        f"{measures}"
    )
