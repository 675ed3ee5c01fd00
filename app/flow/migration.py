"""Request migration: a stream whose decode replica is lost continues on another one.

The ingress knows every token it has streamed. When the replica serving a request dies
(the actor, or only its engine), or its stream stalls past ``stall_timeout_s``, the
orchestrator sends a *continuation* on: the prompt plus the tokens already streamed as
the new prompt, ``max_tokens`` (and ``min_tokens``) reduced by what was sent, prefilled
wherever the router decides. The client sees one stream: no token repeated or lost, and
usage counts the whole answer (the ingress keeps the original prompt).

What carries over exactly: greedy decoding (the same tokens as an uninterrupted run),
stop conditions, logprobs of the new tokens, and the text: after a move, the text is
worked out at the ingress from every token of the answer (an :class:`AnswerText`), so a
character whose bytes span the cut, or a stop string that does, comes out as in an
uninterrupted run. What does not: a seeded sample's random
stream restarts from its seed at the continuation, so seeded sampling is reproducible
only without migration; presence and frequency penalties see the streamed tokens as
prompt (they count output tokens only); ``cumulative_logprob`` continues (the orchestrator
adds the lost stream's total).
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from app.config import MigrationConfig
from app.pool.client import PoolBusy
from app.pool.records import GenerateRequest, TokenChunk

logger = logging.getLogger("splitserve.migration")


class LostCause(StrEnum):
    """Why a stream was taken from its replica (the ``cause`` label of the metric)."""

    REPLICA_DIED = "replica_died"  # the Serve replica (its actor) is gone
    ENGINE_DIED = "engine_died"  # the replica lives, its vLLM engine does not
    STREAM_STALLED = "stream_stalled"  # nothing for stall_timeout_s after the first token


class ReplicaLost(Exception):
    """The replica serving a call died, or its engine did (raised by a PoolClient).

    ``certain``: the call is known to have ended with its replica or engine (nothing of
    it runs on). False where the replica is only unreachable for now (Ray's
    ``ActorUnavailableError``: the call "may or may not have been executed"), so a KV
    read it started may still be running.
    """

    def __init__(self, cause: LostCause, detail: str, certain: bool = True) -> None:
        super().__init__(f"{cause.value}: {detail}")
        self.cause = cause
        self.certain = certain


@dataclass(frozen=True)
class Migration:
    """One move of a request to another replica."""

    cause: LostCause
    tokens_sent: int  # tokens the client had when the stream was lost
    engine_id: str  # the engine it was taken from ("" if unknown)
    detail: str


def continuation(request: GenerateRequest, sent: list[int], number: int) -> GenerateRequest:
    """The request that generates the rest of ``request``'s answer after tokens ``sent``."""
    params = request.sampling_params.clone()
    if params.max_tokens is not None:
        params.max_tokens -= len(sent)
    params.min_tokens = max(0, (params.min_tokens or 0) - len(sent))
    params.prompt_logprobs = None  # sent with the first chunk, long ago
    return replace(
        request,
        request_id=f"{request.request_id}.m{number}",
        prompt_token_ids=[*request.prompt_token_ids, *sent],
        sampling_params=params,
        kv_transfer_params=None,
        kv_object=None,
        kv_num_tokens=0,
        # The streamed part is new to every prefix cache: let the router decide again,
        # unless the request must stay local for a reason that still holds.
        local_prefill_reason=(
            None
            if request.local_prefill_reason == "prompt_logprobs"
            else request.local_prefill_reason
        ),
    )


class AnswerText(ABC):
    """The text of one answer, detokenized from its token ids as the engine would.

    Contract: :meth:`add` takes the answer's tokens in order, from the first, and returns
    the stop string they complete (else ``None``); after it, ``tokens`` is the answer's
    token ids (cut after a stop string's last token), and ``text`` its text, cut before a
    matched stop string unless the request includes it. ``held_back`` is how many
    characters at the end of ``text`` an unfinished stream must not send yet (a stop
    string may be forming there).
    """

    @property
    @abstractmethod
    def tokens(self) -> list[int]: ...

    @property
    @abstractmethod
    def text(self) -> str: ...

    @property
    @abstractmethod
    def held_back(self) -> int: ...

    @abstractmethod
    def add(self, token_ids: list[int], stop_terminated: bool) -> str | None:
        """Append tokens; ``stop_terminated``: the last one is an engine stop (EOS)."""


Serve = Callable[[GenerateRequest], AsyncIterator[TokenChunk]]


async def resumable(
    serve: Serve,
    request: GenerateRequest,
    config: MigrationConfig,
    on_migration: Callable[[Migration], None],
    engine_id: Callable[[], str] = lambda: "",
    answer_text: Callable[[], AnswerText] | None = None,
) -> AsyncIterator[TokenChunk]:
    """``serve(request)``'s chunks; a lost stream continues through ``serve`` again.

    A loss after decode streamed tokens is a migration (at most
    ``config.max_migrations``, each reported to ``on_migration``). A loss before the
    current stream had anything from decode (the request reached a dead replica, or
    nothing live has taken it yet; a first token from prefill may have been sent) is
    retried every ``retry_interval_s`` for up to ``resume_timeout_s``, going on from
    every token sent; then the loss is raised. A full decode queue (:class:`PoolBusy`)
    once the client has tokens is waited out the same way, so a stream that has begun
    is not failed by a queue that is full for a moment; before any token it is raised
    (a plain 503 with ``Retry-After``). Other failures are raised as they are.

    After a migration, chunks carry text from ``answer_text`` (fed every token sent),
    not the continuation's engine, whose detokenizer starts at the cut.
    """
    sent: list[int] = []
    chars_sent = 0
    mended: AnswerText | None = None
    lost_logprob = 0.0  # cumulative logprob of the streams lost so far
    migrations = 0
    tries = 0
    give_up_at: float | None = None
    current = request
    watch = StallWatch(config.stall_timeout_s)
    while True:
        chunks = aiter(serve(current))
        # Whether decode has streamed a chunk of this stream. The watch starts then:
        # before it (after a first token from prefill) the KV is still being handed over,
        # bounded by the transport's own timeouts and fallbacks, and a slow hand-off is
        # not a stalled replica. A stream lost before it never reached a live decode
        # engine: that is a retry, not a move (a continuation whose prefill sent a token
        # and whose decode replica's engine is dead must not spend the moves).
        watching = False
        stream_logprob = 0.0
        try:
            while True:
                try:
                    chunk = await (watch.next(chunks) if watching else anext(chunks))
                except StopAsyncIteration:
                    return
                if not chunk.from_prefill:
                    watching, give_up_at = True, None
                if chunk.cumulative_logprob is not None:
                    stream_logprob = chunk.cumulative_logprob
                    if lost_logprob:
                        chunk = replace(chunk, cumulative_logprob=lost_logprob + stream_logprob)
                if mended is not None:
                    chunk, chars_sent = _mend(chunk, mended, chars_sent)
                else:
                    chars_sent += len(chunk.text)
                sent.extend(chunk.token_ids)
                yield chunk
                if mended is not None and chunk.finish_reason is not None:
                    return  # a stop string found at the ingress ends the continuation
        except ReplicaLost as lost:
            if not config.enabled:
                raise
            if watching:
                if migrations >= config.max_migrations:
                    raise
                migrations += 1
                lost_logprob += stream_logprob
                migration = Migration(lost.cause, len(sent), engine_id(), str(lost))
                logger.warning(
                    "request %s: stream lost after %d tokens (%s); migrating (%d of at most %d)",
                    request.request_id,
                    len(sent),
                    lost,
                    migrations,
                    config.max_migrations,
                )
                on_migration(migration)
                if mended is None and answer_text is not None:
                    mended = answer_text()
                    mended.add(list(sent), stop_terminated=False)
            else:
                now = time.monotonic()
                give_up_at = give_up_at or now + config.resume_timeout_s
                if now >= give_up_at:
                    raise
                await asyncio.sleep(config.retry_interval_s)
        except PoolBusy:
            if not sent:
                raise
            now = time.monotonic()
            give_up_at = give_up_at or now + config.resume_timeout_s
            if now >= give_up_at:
                raise
            logger.info(
                "request %s: the decode pool's queue is full after %d tokens; retrying",
                request.request_id,
                len(sent),
            )
            await asyncio.sleep(config.retry_interval_s)
        finally:
            watch.stop()
            await chunks.aclose()  # type: ignore[attr-defined]
        tries += 1
        max_tokens = request.sampling_params.max_tokens
        if max_tokens is not None and len(sent) >= max_tokens:
            # Lost with only its end to send (and any text held back for stop strings).
            yield TokenChunk(mended.text[chars_sent:] if mended else "", [], finish_reason="length")
            return
        current = (
            continuation(request, sent, tries)
            if sent
            else replace(request, request_id=f"{request.request_id}.r{tries}")
        )


def _mend(chunk: TokenChunk, answer: AnswerText, chars_sent: int) -> tuple[TokenChunk, int]:
    """``chunk`` with the answer's next text, ended where a stop string spanning the cut
    ends it; and the count of characters sent with it."""
    engine_stop = chunk.finish_reason == "stop" and not isinstance(chunk.stop_reason, str)
    before = len(answer.tokens)
    stop = answer.add(chunk.token_ids, stop_terminated=engine_stop)
    if stop is not None:
        kept = answer.tokens[before:]
        logprobs = None if chunk.logprobs is None else list(chunk.logprobs)[: len(kept)]
        chunk = replace(
            chunk, token_ids=kept, logprobs=logprobs, finish_reason="stop", stop_reason=stop
        )
    end = len(answer.text) - (0 if chunk.finish_reason is not None else answer.held_back)
    text = answer.text[chars_sent:end] if end > chars_sent else ""
    return replace(chunk, text=text), max(chars_sent, end)


class StallWatch:
    """One watchdog per stream: a wait for the next chunk longer than ``stall_timeout_s``
    fails as :class:`ReplicaLost` (``stream_stalled``).

    Only the waits on the replica count, not the time the client takes a chunk. One timer
    serves the whole stream: each wait only notes when it began, and the timer, when it
    fires, moves itself to the current wait's deadline, so a stream of chunks well inside
    the limit sets it once per ``stall_timeout_s`` instead of once per chunk (as an
    ``asyncio.timeout`` around each wait did).
    """

    def __init__(self, stall_timeout_s: float) -> None:
        self.stall_timeout_s = stall_timeout_s
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Task[object] | None = None
        self._deadline = 0.0
        self._fired = False

    async def next(self, chunks: AsyncIterator[TokenChunk]) -> TokenChunk:
        """``chunks``' next chunk, within the limit."""
        loop = asyncio.get_running_loop()
        self._waiter = asyncio.current_task()
        self._deadline = loop.time() + self.stall_timeout_s
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._check)
        try:
            return await anext(chunks)
        except asyncio.CancelledError as exc:
            if not self._fired or self._waiter is None or self._waiter.uncancel():
                raise  # a cancel from elsewhere: pass it on
            raise ReplicaLost(
                LostCause.STREAM_STALLED, f"no token for {self.stall_timeout_s:g} s"
            ) from exc
        finally:
            self._waiter = None
            self._fired = False

    def stop(self) -> None:
        """The stream is over (or lost): the timer goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._waiter is None:
            return  # between waits: the next wait sets the timer again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._check)
            return
        self._fired = True
        self._waiter.cancel()
