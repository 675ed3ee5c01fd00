"""A wave of hostile and broken clients against a running app, from outside: the bodies of
``tests/harness/abuse_bodies.py`` (malformed JSON, and fields of the wrong type or shape,
some of which vLLM's own server accepts) and uploads abandoned halfway, then one valid
request, timed, and the ingress's admission gauges."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.harness.abuse_bodies import BAD_CHATS, BAD_COMPLETIONS, RAW_BODIES

JSON = {"content-type": "application/json"}


def _items() -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = [
        (path, body) for body in RAW_BODIES for path in ("/v1/completions", "/v1/chat/completions")
    ]
    items += [("/v1/chat/completions", body) for body in BAD_CHATS]
    items += [("/v1/completions", body) for body in BAD_COMPLETIONS]
    return items


async def malformed(url: str, count: int, concurrency: int = 32) -> dict[str, int]:
    """``count`` hostile requests, ``concurrency`` at a time: how many got each answer,
    as ``"<raw|fields> <status>"`` (a 503 with ``Retry-After`` as ``503 retry``)."""
    statuses: dict[str, int] = {}
    bodies = itertools.islice(itertools.cycle(_items()), count)
    async with httpx.AsyncClient(timeout=60) as client:

        async def worker() -> None:
            for path, body in bodies:
                if isinstance(body, bytes):
                    r = await client.post(f"{url}{path}", content=body, headers=JSON)
                else:
                    r = await client.post(f"{url}{path}", json={"max_tokens": 2, **body})
                retry = " retry" if r.status_code == 503 and r.headers.get("retry-after") else ""
                key = f"{'raw' if isinstance(body, bytes) else 'fields'} {r.status_code}{retry}"
                statuses[key] = statuses.get(key, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


async def abandoned(url: str, count: int, concurrency: int = 50) -> None:
    """``count`` uploads that send their headers and half the body, then hang up."""
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {where.hostname}\r\n"
        "Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
    ).encode()
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            _reader, writer = await asyncio.open_connection(where.hostname, where.port)
            writer.write(head + b'{"prompt": "half a bo')
            await writer.drain()
            writer.close()
            await writer.wait_closed()

    await asyncio.gather(*(one() for _ in range(count)))


def valid_then_gauges(url: str, metrics_url: str) -> dict[str, Any]:
    """One valid completion, timed from send to its whole answer, then the admission
    gauges of ``metrics_url``'s ingress replica."""
    body = {"model": "tiny-llama", "prompt": "Hello there", "max_tokens": 4, "temperature": 0}
    with httpx.Client(timeout=60) as client:
        sent = time.perf_counter()
        r = client.post(f"{url}/v1/completions", json=body)
        took = time.perf_counter() - sent
        page = client.get(f"{metrics_url}/metrics").text
    gauges = {
        name: float(line.split()[1])
        for line in page.splitlines()
        for name in ("splitserve_admission_waiting", "splitserve_admission_parsing")
        if line.startswith(name + " ")
    }
    return {"status": r.status_code, "seconds": took, "gauges": gauges}
