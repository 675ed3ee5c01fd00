"""SSE events from an httpx response, parsed by httpx-sse.

httpx-sse (0.4.3 and later) splits lines only where the SSE spec does (CR, LF, CRLF).
httpx's own ``iter_lines`` also splits on the other Unicode line breaks (U+2028, U+0085,
...), which servers that write JSON without escaping non-ASCII (vLLM's does) leave raw
inside an event when the model generates them. ``tests/unit/test_sse_lines.py`` holds
the pinned version to that.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from httpx_sse import EventSource

# The OpenAI API's last event of a stream.
DONE = "[DONE]"


def sse_data_sync(response: httpx.Response) -> Iterator[str]:
    """Each event's data, read with a blocking client (``[DONE]`` included)."""
    for event in EventSource(response).iter_sse():
        yield event.data


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """Each event's data (``[DONE]`` included)."""
    async for event in EventSource(response).aiter_sse():
        yield event.data


def sse_json_sync(response: httpx.Response) -> Iterator[Any]:
    """Each event's JSON body, read with a blocking client; ``[DONE]`` is left out."""
    for data in sse_data_sync(response):
        if data != DONE:
            yield json.loads(data)


async def sse_json(response: httpx.Response) -> AsyncIterator[Any]:
    """Each event's JSON body; ``[DONE]`` is left out."""
    async for data in sse_data(response):
        if data != DONE:
            yield json.loads(data)
