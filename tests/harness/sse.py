"""SSE lines as the SSE spec splits them, from an httpx response."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

import httpx


class SSESplitter:
    """Splits text into SSE lines where the SSE spec splits them (CR, LF, CRLF).

    httpx's ``iter_lines`` / ``aiter_lines`` also split on the other Unicode line breaks
    (U+2028, U+0085, ...), which servers that write JSON without escaping non-ASCII
    (vLLM's does) leave raw inside an event when the model generates them.
    """

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, text: str) -> list[str]:
        """The lines that ``text`` completes."""
        pending = self.pending + text
        # A trailing CR may be the first half of a CRLF: keep it for the next chunk.
        complete, tail = (pending[:-1], "\r") if pending.endswith("\r") else (pending, "")
        *lines, rest = re.split(r"\r\n|\r|\n", complete)
        self.pending = rest + tail
        return lines

    def end(self) -> list[str]:
        """The last line, if the stream did not end with a line break."""
        last = self.pending.rstrip("\r")
        self.pending = ""
        return [last] if last else []


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The lines of an SSE stream (:class:`SSESplitter`)."""
    splitter = SSESplitter()
    async for text in response.aiter_text():
        for line in splitter.feed(text):
            yield line
    for line in splitter.end():
        yield line


def sse_lines_sync(response: httpx.Response) -> Iterator[str]:
    """The lines of an SSE stream read with a blocking client (:class:`SSESplitter`)."""
    splitter = SSESplitter()
    for text in response.iter_text():
        yield from splitter.feed(text)
    yield from splitter.end()
