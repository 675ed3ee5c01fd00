"""The SSE post-processing (app.api.sse_report.with_report): a token's event goes on as
soon as it comes; only the usage event waits, to take the splitserve field."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from app.api.sse_report import SSE_DONE, with_report
from app.flow.request_timings import RequestTimings


def _event(body: dict[str, object]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


TOKEN = _event({"choices": [{"text": "a"}], "usage": None})
USAGE = _event({"choices": [], "usage": {"completion_tokens": 2}})


async def test_each_tokens_event_is_passed_on_before_the_next_one_exists():
    produced: list[str] = []
    ended: list[bool] = []

    async def events() -> AsyncIterator[str]:
        for event in (TOKEN, USAGE, SSE_DONE):
            produced.append(event)
            yield event

    stream = with_report(TOKEN, events(), [RequestTimings()], lambda: ended.append(True))
    assert await anext(stream) == TOKEN and produced == []  # the first, at once
    assert await anext(stream) == TOKEN and produced == [TOKEN]  # the second, at once
    usage = await anext(stream)  # the usage event, once [DONE] showed it is the last
    assert produced == [TOKEN, USAGE, SSE_DONE]
    assert "splitserve" in json.loads(usage[len("data: ") :])
    assert await anext(stream) == SSE_DONE
    await stream.aclose()  # type: ignore[attr-defined]
    assert ended == [True]


async def test_a_stream_without_usage_or_done_loses_nothing():
    async def events() -> AsyncIterator[str]:
        yield TOKEN
        yield USAGE  # the stream broke before [DONE]

    got = [e async for e in with_report(TOKEN, events(), [RequestTimings()], lambda: None)]
    assert got == [TOKEN, TOKEN, USAGE]


def test_with_no_engine_request_the_usage_event_is_left_as_it_is():
    async def events() -> AsyncIterator[str]:
        yield SSE_DONE

    async def collect() -> list[str]:
        return [e async for e in with_report(USAGE, events(), [], lambda: None)]

    assert asyncio.run(collect()) == [USAGE, SSE_DONE]
