"""SSE as the test and load clients read it (load_tests.client.sse, on httpx-sse): lines split
only where the SSE spec splits them, whatever the chunking."""

import asyncio
from collections.abc import AsyncIterator

import httpx

from load_tests.client.sse import sse_data, sse_data_sync, sse_json

SSE = {"content-type": "text/event-stream; charset=utf-8"}


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def _data(chunks: list[bytes]) -> list[str]:
    async def collect() -> list[str]:
        response = httpx.Response(200, headers=SSE, stream=_Chunks(chunks))
        return [data async for data in sse_data(response)]

    return asyncio.run(collect())


def test_unicode_line_breaks_inside_an_event_do_not_split_it():
    body = '{"text": "a\u2028b\u0085c\x1cd"}'
    assert _data([f"data: {body}\n\n".encode()]) == [body]


def test_crlf_split_across_chunks_is_one_line_break():
    assert _data([b"data: 1\r", b"\n\r\ndata: 2\r\n", b"\r\n"]) == ["1", "2"]


def test_an_event_split_across_chunks_is_one_event():
    assert _data([b"data: 1\n\ndata: [DO", b"NE]\n\n"]) == ["1", "[DONE]"]


def test_json_bodies_leave_done_out():
    async def collect() -> list[object]:
        chunks = [b'data: {"a": 1}\n\n', b"data: [DONE]\n\n"]
        response = httpx.Response(200, headers=SSE, stream=_Chunks(chunks))
        return [event async for event in sse_json(response)]

    assert asyncio.run(collect()) == [{"a": 1}]


def test_the_blocking_reader_splits_the_same_way():
    chunks = [b'data: {"t": "a\xe2\x80\xa8b"}\r', b"\n\r\ndata: [DO", b"NE]\n\n"]
    response = httpx.Response(200, headers=SSE, content=b"".join(chunks))
    assert list(sse_data_sync(response)) == ['{"t": "a\u2028b"}', "[DONE]"]
