"""SSE post-processing of vLLM's streamed answers: the ``splitserve`` field added to the
usage event, and a stream's error event told from its first event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from app.api.request_report import splitserve_field
from app.flow.request_timings import RequestTimings

SSE_DONE = "data: [DONE]\n\n"


async def with_report(
    first: str,
    events: AsyncIterator[str],
    timings: list[RequestTimings],
    on_end: Callable[[], None],
    internals: bool = True,
) -> AsyncIterator[str]:
    """Re-yield the SSE ``events`` as they come; the usage event (the last before
    ``[DONE]``, sent when the client asked for usage) gets the ``splitserve`` field.
    Only an event that carries usage waits for the next one (to know whether it is the
    last); the tokens' events go on at once. ``on_end`` runs at the end, however the
    stream ends. ``internals``: the field's full form (app.api.request_report)."""
    held: str | None = None
    try:
        async for event in _chain(first, events):
            if held is not None:
                if event == SSE_DONE and timings:
                    held = _add_report(held, timings, internals)
                yield held
                held = None
            if _carries_usage(event):
                held = event
            else:
                yield event
        if held is not None:
            yield held
    finally:
        on_end()
        await events.aclose()  # type: ignore[attr-defined]


async def _chain(first: str, events: AsyncIterator[str]) -> AsyncIterator[str]:
    yield first
    async for event in events:
        yield event


def _carries_usage(event: str) -> bool:
    """Whether an event has a usage object (vLLM writes compact JSON; a token's event
    has none, or ``"usage":null``)."""
    return '"usage":{' in event or '"usage": {' in event


def _add_report(event: str, timings: list[RequestTimings], internals: bool) -> str:
    body = json.loads(event[len("data: ") :])
    if body.get("usage") is None or "error" in body:
        return event
    body["splitserve"] = splitserve_field(timings, internals)
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def error_event(event: str) -> dict[str, Any] | None:
    if not event.startswith('data: {"error"'):
        return None
    body: dict[str, Any] = json.loads(event[len("data: ") :])
    return body
