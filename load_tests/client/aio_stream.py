"""One streamed OpenAI completion over aiohttp, timed: the client for load far beyond
capacity.

On two cores shared with the engines, httpx's own cost for 300 concurrent streams was
1.7 s before a trivial server's answer; aiohttp's 0.15 s. So the overload benchmark and
the first-minute test send with this one.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Streamed:
    """What a client saw of one streamed completion; seconds from ``since``."""

    status: int = 0
    head_s: float = 0.0  # the response's status line and headers
    ttft_s: float | None = None  # the first event with choices
    end_s: float = 0.0
    retry_after: str | None = None
    error: str = ""  # a refusal's body, or an SSE error event's
    usage: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None  # the usage event's `splitserve` field


def session(total_timeout_s: float = 900) -> Any:
    """An aiohttp session with no connection limit."""
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=total_timeout_s),
    )


async def events(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an aiohttp response's SSE stream, ``[DONE]`` left out."""
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: ") :])


async def stream_completion(
    client: Any,
    url: str,
    body: dict[str, Any],
    since: float | None = None,
    headers: dict[str, str] | None = None,
) -> Streamed:
    """POST ``body`` (streamed, with usage) to ``url``/v1/completions with ``headers`` and
    read it to the end; times count from ``since`` (``time.perf_counter()``; now if None)."""
    since = time.perf_counter() if since is None else since
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    result = Streamed()
    async with client.post(f"{url}/v1/completions", json=body, headers=headers) as response:
        result.status = response.status
        result.head_s = time.perf_counter() - since
        result.retry_after = response.headers.get("Retry-After")
        if response.status != 200:
            result.error = await response.text()
            result.end_s = time.perf_counter() - since
            return result
        async for event in events(response):
            if "error" in event:
                result.error = json.dumps(event)
            if event.get("choices") and result.ttft_s is None:
                result.ttft_s = time.perf_counter() - since
            if event.get("usage"):
                result.usage = event["usage"]
                result.report = event.get("splitserve")
    result.end_s = time.perf_counter() - since
    return result
