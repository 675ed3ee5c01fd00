"""Orchestration of one request across the pools, and where the transfer fallback is decided.

The ingress drives both steps (docs/architecture.md, "Layout", says why): it asks the
prefill pool to compute the prompt's KV and hand it over by a transport, then asks the
decode pool to generate with that KV. The transports are tried in the order of the
request's plan (:mod:`app.kv.fallback`): when a prefill fails or times out, or the
decode replica reports that it could not use the KV, the next transport is tried; the
last is always a local recompute on the decode replica. In colocated mode the decode
pool serves the whole request. Pools are reached through
:class:`~app.pool.client.PoolClient`, so this logic runs the same against Ray Serve
handles and against test fakes. One prefill call is :mod:`app.flow.prefill_call`; one
decode attempt's first chunk, and a request on decode alone, :mod:`app.flow.decode_call`;
how long kept NIXL blocks may still be read, :mod:`app.flow.kv_lease`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from app.config import MigrationConfig, Mode, TransportConfig
from app.flow.decode_call import DecodeAttempt, decode_only, first_chunk, note_kv
from app.flow.disaggregation import decide
from app.flow.first_token import (
    Diverged,
    after_first_token,
    continues_in_place,
    first_token_allowed,
    is_greedy,
    whole_text,
    without_repeat,
)
from app.flow.kv_lease import kv_expiry
from app.flow.migration import AnswerText, ReplicaLost, resumable
from app.flow.prefill_call import POOL_UNAVAILABLE, prefill_failure, prefill_once
from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind, TransferFailure, describe_failure
from app.kv.fallback import Attempt, TransferReport, Transport
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult, TokenChunk
from app.routing import routed_expectations
from app.routing.decode_affinity import DecodeAffinity

logger = logging.getLogger("splitserve.orchestrator")


class Orchestrator:
    """Runs requests in ``mode`` over a prefill pool (disaggregated only) and a decode pool.

    Timeouts, each measuring what it names (``transport`` in the YAML):
    ``prefill_queue_timeout_s`` bounds the wait for a prefill replica to start the
    prefill; ``prefill_timeout_s`` the prefill itself from then; ``transfer_timeout_s``
    the wait for decode's first token from when the decode replica started the request
    (an object-store fetch, the decode engine's own queue, the KV read and one step).
    Waiting in Serve's queue for the decode pool has no limit but the request's
    deadline: a busy decode pool would be as busy for a recompute.
    """

    def __init__(
        self,
        mode: Mode,
        decode: PoolClient,
        prefill: PoolClient | None = None,
        plan: tuple[Transport, ...] = (Transport.NIXL, Transport.RECOMPUTE),
        timeouts: TransportConfig | None = None,
        on_transfer: Callable[[TransferReport], None] | None = None,
        local_prefill_below_tokens: int = 0,
        max_prefill_backlog: int = 1 << 30,
        migration: MigrationConfig | None = None,
        prefill_serving: Callable[[], bool] | None = None,
        decode_affinity: DecodeAffinity | None = None,
        on_token_gap: Callable[[float, bool], None] | None = None,
        first_token_on_prefill: bool = False,
    ) -> None:
        if mode is Mode.DISAGGREGATED and prefill is None:
            raise ValueError("disaggregated mode needs a prefill pool")
        if not plan or plan[-1] is not Transport.RECOMPUTE:
            raise ValueError("a transfer plan must end with recompute")
        self.mode = mode
        self.decode = decode
        self.prefill = prefill
        self.plan = plan
        self.timeouts = timeouts or TransportConfig()
        self.on_transfer = on_transfer
        self.local_prefill_below_tokens = local_prefill_below_tokens
        self.max_prefill_backlog = max_prefill_backlog
        self.migration = migration or MigrationConfig()
        # Whether the prefill pool has a replica serving now (app.api.readiness); when not,
        # prompts are prefilled on decode at once instead of waiting in its queue.
        self.prefill_serving = prefill_serving or (lambda: True)
        self.prefills_in_flight = 0
        # Which decode replica caches which conversation (the decode router's memory):
        # the decision counts the prompt tokens that replica lacks.
        self.decode_affinity = decode_affinity
        # Each gap between two chunks of tokens as it is streamed (seconds, whether a
        # remote prefill served the request): ITL is recorded as the stream goes, not in
        # a burst of histogram calls when it ends.
        self.on_token_gap = on_token_gap
        # Stream the answer's first token from the prefill engine (app.flow.first_token).
        self.first_token_on_prefill = first_token_on_prefill
        self._gap_failed = False
        self._releases: set[asyncio.Task[None]] = set()

    async def run(
        self,
        request: GenerateRequest,
        timings: RequestTimings | None = None,
        answer_text: Callable[[], AnswerText] | None = None,
    ) -> AsyncIterator[TokenChunk]:
        """Stream ``request``'s tokens; in disaggregated mode, move its KV by the plan.

        A stream whose decode replica is lost continues on another (:mod:`app.flow.migration`);
        after such a move its text comes from ``answer_text``, when given.
        """
        timings = timings or RequestTimings()
        started = time.perf_counter()

        def serve(current: GenerateRequest) -> AsyncIterator[TokenChunk]:
            if current is not request:  # a continuation makes its own transfer decision
                timings.transfer = TransferReport()
            if self.mode is Mode.COLOCATED:
                return decode_only(self.decode, current, timings)
            return self._disaggregated(current, timings)

        chunks = resumable(
            serve,
            request,
            self.migration,
            timings.migrations.append,
            lambda: timings.decode_engine,
            answer_text,
        )
        last = 0.0
        answer: list[int] = []
        try:
            async for chunk in chunks:
                now = time.perf_counter() - started
                if not last:
                    timings.first_token_s = now
                elif chunk.token_ids:
                    timings.token_gaps_s.append(now - last)
                    if self.on_token_gap is not None:
                        self._token_gap(now - last, timings.disaggregated)
                last = now
                answer += chunk.token_ids
                yield chunk
            if self.decode_affinity is not None and self.mode is Mode.DISAGGREGATED:
                # Its decode replica now caches the answer too: the next turn's prefix.
                self.decode_affinity.ended(
                    request.origin_id or request.request_id,
                    request.prompt_token_ids,
                    answer,
                    request.request_id,
                    request.cache_salt,
                )
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
            timings.routed_cached_tokens = routed_expectations.take(request.request_id)
            # One report per request, whatever migrations and retries it took: the last
            # stream's (an earlier stream's losses are counted as migrations).
            if self.mode is Mode.DISAGGREGATED:
                self._record(timings.transfer)
        timings.total_s = time.perf_counter() - started

    async def _disaggregated(
        self, request: GenerateRequest, timings: RequestTimings
    ) -> AsyncIterator[TokenChunk]:
        report = timings.transfer
        lacking, holder = None, None
        if self.decode_affinity is not None:
            lacking, holder = self.decode_affinity.lacking(
                request.prompt_token_ids, request.session_id, request.request_id, request.cache_salt
            )
        decision = decide(
            len(request.prompt_token_ids),
            self.local_prefill_below_tokens,
            self.prefills_in_flight,
            self.max_prefill_backlog,
            request.local_prefill_reason,
            self.prefill_serving(),
            lacking,
        )
        report.remote_prefill, report.decision_reason = decision.remote, decision.reason
        if decision.reason == "decode_cached" and holder is not None and not request.replica:
            request = replace(request, replica=holder)  # to the replica that caches it
        chunks = (
            self._transferred(request, timings)
            if decision.remote
            else decode_only(self.decode, request, timings)
        )
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]

    async def _transferred(
        self, request: GenerateRequest, timings: RequestTimings
    ) -> AsyncIterator[TokenChunk]:
        """Try the plan's transports in order; the first whose KV decode can use serves.

        Where the prefill samples the answer's first token (:mod:`app.flow.first_token`),
        the client gets it at once; then decode either repeats it (greedy: its first
        token is checked and dropped) or continues from prompt + it (sampled).
        """
        report = timings.transfer
        prefill_reachable = True
        # Whether the prefill may sample the answer's first token (once, on NIXL's path).
        ask_first = self.first_token_on_prefill and first_token_allowed(request.sampling_params)
        repeat: TokenChunk | None = None  # sent from prefill; decode's first token repeats it
        for number, transport in enumerate(self.plan):
            if repeat is not None:  # sent, and the attempt meant to repeat it failed
                request, repeat = after_first_token(request, repeat), None
            attempt = (
                request
                if number == 0
                else replace(request, request_id=f"{request.request_id}.{number}")
            )
            if transport is not Transport.RECOMPUTE:
                if not prefill_reachable:
                    continue  # every transport but recompute needs the prefill pool
                asked = ask_first and transport is Transport.NIXL
                try:
                    result = await self._prefill(
                        replace(attempt, sample_first_token=True) if asked else attempt,
                        transport,
                        timings,
                    )
                except Exception as exc:  # any failure falls back to the next transport
                    failure = prefill_failure(exc)
                    # A prefill pool that is busy or slow would be as busy or slow for the
                    # next transport; one that failed this transport may serve another.
                    prefill_reachable = failure.kind not in POOL_UNAVAILABLE
                    report.attempts.append(Attempt(transport, failure))
                    _log_fallback(request, transport, failure)
                    continue
                # The lease runs from the prefill's end, not from when the client has
                # taken the first token: the read deadline is set before it is sent.
                expires_at = (
                    kv_expiry(self.timeouts.kv_lease_s) if result.kv_transfer_params else None
                )
                sampled = result.first_token
                if sampled is not None and not whole_text(sampled, request.sampling_params):
                    sampled = None  # part of a character: decode samples the first token
                if sampled is not None:
                    sampled = replace(sampled, from_prefill=True)
                greedy = sampled is not None and is_greedy(request.sampling_params)
                if sampled is not None and (
                    greedy or continues_in_place(result.num_prompt_tokens, result.block_tokens)
                ):
                    ask_first = False
                    report.first_token_on_prefill = True
                    try:
                        yield sampled
                    except BaseException:  # the client is gone: no decode will read
                        self._release(result)
                        raise
                    if sampled.finish_reason is not None:  # the answer ended at it
                        report.attempts.append(Attempt(transport))
                        self._release(result)
                        return
                    if greedy:
                        repeat = sampled
                    else:  # decode goes on from prompt + that token
                        request = attempt = after_first_token(request, sampled)
                attempt = replace(
                    attempt,
                    kv_transfer_params=result.kv_transfer_params,
                    kv_object=result.kv_object,
                    kv_num_tokens=result.num_prompt_tokens,
                    kv_expires_at=expires_at,
                    kv_source=result.replica,
                )
                report.transfer_s = result.publish_s
            stream = self.decode.generate(attempt)
            # Whether the decode attempt is known to be over without a read in flight:
            # only then may prefill free the blocks at once. Otherwise (a timed-out read,
            # a client gone while decode reads) decode's abort tells prefill itself
            # (vLLM's connector), or the lease frees them.
            over = DecodeAttempt()
            diverged = False
            try:
                try:
                    first = await first_chunk(
                        stream, transport, self.timeouts.transfer_timeout_s, timings, over
                    )
                except Exception as exc:  # the decode pool failed: so does the request
                    failure = TransferFailure(FailureKind.DECODE_ERROR, describe_failure(exc))
                    report.attempts.append(Attempt(transport, failure))
                    # Never started, or its replica or engine is surely gone: no read in
                    # flight. A replica only unreachable may still read: the lease frees.
                    over.ended = not over.started or (isinstance(exc, ReplicaLost) and exc.certain)
                    raise
                if first is not None and first.transfer_failed is not None:
                    report.attempts.append(Attempt(transport, first.transfer_failed))
                    _log_fallback(request, transport, first.transfer_failed)
                    # Decode said it could not use the KV: its read is over, unless it
                    # is only our timer that ran out.
                    over.ended = first.transfer_failed.kind is not FailureKind.TRANSFER_TIMEOUT
                    continue
                report.attempts.append(Attempt(transport))
                over.used = True
                if first is None:
                    return
                if attempt.kv_object is not None:  # fetched: this frame no longer pins it
                    attempt = replace(attempt, kv_object=None)
                    result = replace(result, kv_object=None)
                publish_s = report.transfer_s
                note_kv(first, timings, publish_s)
                rest: TokenChunk | None = first
                if repeat is not None:
                    try:
                        rest = without_repeat(first, repeat)
                    except Diverged as exc:
                        diverged = True
                        logger.warning("request %s: %s; going on from it", request.request_id, exc)
                if not diverged:
                    if rest is not None:
                        yield rest
                    async for item in stream:
                        if isinstance(item, TokenChunk):
                            note_kv(item, timings, publish_s)
                            yield item
                    return
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
                if over.ended and not over.used and attempt.kv_transfer_params is not None:
                    self._release(result)
            # Decode sampled another first token than the one sent (greedy decoding's ties
            # round differently on two engines, rarely): the answer goes on from the one
            # sent, on decode, which now caches the prompt.
            assert repeat is not None
            chunks = decode_only(self.decode, after_first_token(request, repeat), timings)
            try:
                async for chunk in chunks:
                    yield chunk
            finally:
                await chunks.aclose()  # type: ignore[attr-defined]
            return
        raise RuntimeError("every transport failed, recompute included")

    async def _prefill(
        self, request: GenerateRequest, transport: Transport, timings: RequestTimings
    ) -> PrefillResult:
        """One prefill (:func:`app.flow.prefill_call.prefill_once`), counted in flight."""
        assert self.prefill is not None
        self.prefills_in_flight += 1
        try:
            return await prefill_once(self.prefill, request, transport, self.timeouts, timings)
        finally:
            self.prefills_in_flight -= 1

    def _release(self, result: PrefillResult) -> None:
        """Free a failed attempt's NIXL blocks on prefill now, without waiting for it."""
        assert self.prefill is not None
        task = asyncio.ensure_future(self.prefill.release(result))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def _token_gap(self, seconds: float, remote: bool) -> None:
        assert self.on_token_gap is not None
        try:
            self.on_token_gap(seconds, remote)
        except Exception:  # metrics must never fail a request
            if not self._gap_failed:
                logger.exception("recording a token gap failed (logged once)")
            self._gap_failed = True

    def _record(self, report: TransferReport) -> None:
        if self.on_transfer is None:
            return
        try:
            self.on_transfer(report)
        except Exception:  # metrics must never fail a request
            logger.exception("recording the transfer report failed")


def _log_fallback(request: GenerateRequest, transport: Transport, failure: TransferFailure) -> None:
    # The client still gets its answer; operators should still see why the KV took
    # another path (the same reason is in the request's ``splitserve`` field).
    logger.warning(
        "request %s: KV over %s failed (%s); falling back", request.request_id, transport, failure
    )
