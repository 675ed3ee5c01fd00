"""The load client's SSE line splitting (tests.harness.sse.sse_lines)."""

import asyncio
from collections.abc import AsyncIterator

import httpx

from tests.harness.sse import sse_lines, sse_lines_sync


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def _lines(chunks: list[bytes]) -> list[str]:
    async def collect() -> list[str]:
        response = httpx.Response(200, stream=_Chunks(chunks))
        return [line async for line in sse_lines(response)]

    return asyncio.run(collect())


def test_unicode_line_breaks_inside_an_event_do_not_split_it():
    event = 'data: {"text": "a\u2028b\u0085c\x1cd"}'
    assert _lines([(event + "\n\n").encode()]) == [event, ""]


def test_crlf_split_across_chunks_is_one_line_break():
    assert _lines([b"data: 1\r", b"\ndata: 2\r\n", b"\r\n"]) == ["data: 1", "data: 2", ""]


def test_a_last_line_without_a_break_is_kept():
    assert _lines([b"data: 1\ndata: [DO", b"NE]"]) == ["data: 1", "data: [DONE]"]


def test_the_blocking_reader_splits_the_same_way():
    chunks = [b'data: {"t": "a\xe2\x80\xa8b"}\r', b"\ndata: [DO", b"NE]"]
    response = httpx.Response(200, content=b"".join(chunks))
    assert list(sse_lines_sync(response)) == ['data: {"t": "a\u2028b"}', "data: [DONE]"]
