"""The open-loop replay client: each request sent at its arrival time, whatever the
server is doing, against any OpenAI-compatible ``/v1/completions``.

Open loop: a request's send is scheduled at an absolute time and never waits for an
earlier answer, so an overloaded server cannot slow the clock (no coordinated
omission); every time is counted from the scheduled arrival, and how late each send
really left is reported (``send_lag_ms``): a client that cannot keep up shows there.
Each prompt is random token ids of the stated length (``ignore_eos`` and ``max_tokens``
force the stated output), its own per request, so no prompt shares a cached prefix.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import random
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.replay.trace import TraceRequest

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass
class Answer:
    """What one request got: times in seconds from its scheduled arrival."""

    at_s: float
    prompt_tokens: int
    output_tokens: int  # asked for
    status: int = 0
    error: str = ""
    send_lag_s: float = 0.0
    token_times_s: list[float] = field(default_factory=list)
    path: str = ""  # from the `splitserve` field where the server sends one
    engine: str = ""  # the engine that decoded it, where the server reports its internals
    sent: bool = False
    done: bool = False  # its answer ended (or failed)

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (None: fewer than two)."""
        times = self.token_times_s
        if len(times) < 2:
            return None
        return (times[-1] - times[0]) / (len(times) - 1)

    @property
    def answered(self) -> bool:
        return self.status == 200 and not self.error and bool(self.token_times_s)


def prompt_ids(rng: random.Random, length: int, vocab: int) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(length)]


async def replay(
    url: str,
    model: str,
    requests: Sequence[TraceRequest],
    seed: int = 0,
    vocab: int = 1000,
    headers: dict[str, str] | None = None,
    timeout_s: float = 600.0,
    progress: str | None = None,
) -> list[Answer]:
    """Send ``requests`` at their times to ``url``; one :class:`Answer` each, in order.
    With ``progress`` (a label), a line on stderr every few seconds: sent, answered,
    failed and in flight."""
    import httpx

    rng = random.Random(seed)
    prompts = [prompt_ids(rng, r.prompt_tokens, vocab) for r in requests]
    answers = [Answer(r.at_s, r.prompt_tokens, r.output_tokens) for r in requests]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits, headers=headers) as client:
        started = time.perf_counter() + 0.5  # room to schedule every send

        async def send(index: int) -> None:
            request, answer = requests[index], answers[index]
            due = started + request.at_s
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            answer.send_lag_s = time.perf_counter() - due
            answer.sent = True
            body = {
                "model": model,
                "prompt": prompts[index],
                "max_tokens": request.output_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
                "return_token_ids": True,
            }
            try:
                await _stream(client, url, body, due, answer)
            except httpx.HTTPError as exc:
                answer.error = f"{type(exc).__name__}: {exc}"[:200]
            finally:
                answer.done = True

        reporter = asyncio.create_task(_report(progress, answers)) if progress else None
        try:
            await asyncio.gather(*(send(i) for i in range(len(requests))))
        finally:
            if reporter is not None:
                reporter.cancel()
                _progress_line(progress or "", answers, final=True)
    return answers


def _progress_line(label: str, answers: Sequence[Answer], final: bool = False) -> None:
    import sys

    sent = sum(a.sent for a in answers)
    done = sum(a.done for a in answers)
    answered = sum(a.answered for a in answers if a.done)
    failed = done - answered
    end = "\n" if final else "\r"
    print(
        f"{label}: sent {sent}/{len(answers)}, answered {answered}, failed {failed}, "
        f"in flight {sent - done}   ",
        end=end,
        file=sys.stderr,
        flush=True,
    )


async def _report(label: str, answers: Sequence[Answer], every_s: float = 2.0) -> None:
    while True:
        await asyncio.sleep(every_s)
        _progress_line(label, answers)


async def _stream(client: Any, url: str, body: dict[str, Any], due: float, answer: Answer) -> None:
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        answer.status = response.status_code
        if response.status_code != 200:
            answer.error = (await response.aread()).decode(errors="replace")[:600]
            return
        # read to the end, as the server closes
        async for line in sse_lines(response.aiter_bytes()):
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                continue
            try:
                event = json.loads(data)
            except ValueError:
                answer.error = f"an event that is not JSON: {data[:120]!r}"
                continue
            if "error" in event:
                answer.error = json.dumps(event["error"])[:200]
                continue
            now = time.perf_counter() - due
            for choice in event.get("choices") or ():
                ids = choice.get("token_ids")
                count = len(ids) if ids is not None else int(bool(choice.get("text")))
                answer.token_times_s += [now] * count
            report = event.get("splitserve")
            if report:
                answer.path = _path(report)
                answer.engine = str(report.get("decode_engine") or "")


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of an event stream, split where the SSE spec splits them (CR LF, LF or
    CR) and nowhere else: httpx's ``aiter_lines`` also splits on U+2028, U+0085 and the
    other Unicode line breaks, which a server writing JSON without escaping non-ASCII
    (vLLM's, splitserve's) leaves raw inside an event when the model generates them."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    async for chunk in chunks:
        pending += decoder.decode(chunk)
        # A CR at the end may be the first half of a CR LF: it waits for what follows.
        cut = len(pending) - 1 if pending.endswith("\r") else len(pending)
        *lines, rest = _LINE_END.split(pending[:cut])
        pending = rest + pending[cut:]
        for line in lines:
            yield line
    pending += decoder.decode(b"", final=True)
    for line in _LINE_END.split(pending):
        if line:
            yield line


def _path(report: dict[str, Any]) -> str:
    """How the request was served, as the ``splitserve`` field says: ``local`` (prefilled
    where it decoded), or the KV's transport (``nixl``, ``object_store``, ``recompute``)."""
    transport = report.get("kv_transport")
    return str(transport) if transport else "local"
