"""Orchestration of one request across the pools, and where the transfer fallback is decided.

The ingress drives both steps (README, "Layout" explains why): it asks the prefill pool to
compute the prompt's KV and hand it over by a transport, then asks the decode pool to
generate with that KV. The transports are tried in the order of the request's plan
(:mod:`app.kv_transport.fallback`): when a prefill fails or times out, or the decode
replica reports that it could not use the KV, the next transport is tried; the last is
always a local recompute on the decode replica. In colocated mode the decode pool
serves the whole request. Pools are reached through :class:`PoolClient`, so this logic
runs the same against Ray Serve handles and against test fakes.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from app.config import Mode
from app.errors import describe_failure
from app.kv_transport.fallback import Attempt, TransferReport, Transport
from app.records import GenerateRequest, PrefillResult, TokenChunk
from app.routing.disaggregation import decide


class PoolClient(ABC):
    """How the orchestrator reaches one pool of engine replicas.

    Contracts:
    - ``prefill``: runs the prompt on one replica and hands its KV over by ``transport``
      (NIXL: the replica holds the blocks until a decode replica pulls them, the
      request is aborted, or the lease expires; object store: the result references a
      Ray object freed when the last reference is dropped). Raises on failure.
    - ``generate``: streams the request's tokens from one replica. If the request's
      transferred KV cannot be used, the first chunk has ``transfer_failed`` set and no
      tokens. Closing the iterator early (the caller stops, is cancelled or times out)
      must abort the request on that replica and free its KV blocks.
    """

    @abstractmethod
    async def prefill(self, request: GenerateRequest, transport: Transport) -> PrefillResult: ...

    @abstractmethod
    def generate(self, request: GenerateRequest) -> AsyncIterator[TokenChunk]: ...


@dataclass
class RequestTimings:
    """Where one request's time went, in seconds, and how its KV moved (filled as it runs)."""

    prefill_s: float = 0.0
    kv_fetch_s: float = 0.0
    decode_first_token_s: float = 0.0
    first_token_s: float = 0.0
    total_s: float = 0.0
    transfer: TransferReport = field(default_factory=TransferReport)
    prefill_engine: str = ""
    prefill_cached_tokens: int = 0
    decode_engine: str = ""
    token_gaps_s: list[float] = field(default_factory=list)  # between token chunks (ITL)

    @property
    def disaggregated(self) -> bool:
        """Whether a remote prefill served the request (not a local prefill on decode)."""
        return self.transfer.remote_prefill and bool(self.prefill_engine)


class Orchestrator:
    """Runs requests in ``mode`` over a prefill pool (disaggregated only) and a decode pool."""

    def __init__(
        self,
        mode: Mode,
        decode: PoolClient,
        prefill: PoolClient | None = None,
        plan: tuple[Transport, ...] = (Transport.NIXL, Transport.RECOMPUTE),
        prefill_timeout_s: float = 30.0,
        on_transfer: Callable[[TransferReport], None] | None = None,
        transfer_timeout_s: float = 30.0,
        local_prefill_below_tokens: int = 0,
        max_prefill_backlog: int = 1 << 30,
    ) -> None:
        if mode is Mode.DISAGGREGATED and prefill is None:
            raise ValueError("disaggregated mode needs a prefill pool")
        if not plan or plan[-1] is not Transport.RECOMPUTE:
            raise ValueError("a transfer plan must end with recompute")
        self.mode = mode
        self.decode = decode
        self.prefill = prefill
        self.plan = plan
        self.prefill_timeout_s = prefill_timeout_s
        self.transfer_timeout_s = transfer_timeout_s
        self.on_transfer = on_transfer
        self.local_prefill_below_tokens = local_prefill_below_tokens
        self.max_prefill_backlog = max_prefill_backlog
        self.prefills_in_flight = 0

    async def run(
        self, request: GenerateRequest, timings: RequestTimings | None = None
    ) -> AsyncIterator[TokenChunk]:
        """Stream ``request``'s tokens; in disaggregated mode, move its KV by the plan."""
        timings = timings or RequestTimings()
        started = time.perf_counter()
        if self.mode is Mode.COLOCATED:
            chunks = self.decode.generate(request)
        else:
            chunks = self._disaggregated(request, timings, started)
        last = 0.0
        try:
            async for chunk in chunks:
                now = time.perf_counter() - started
                if not last:
                    timings.first_token_s = now
                    timings.decode_engine = chunk.engine_id
                elif chunk.token_ids:
                    timings.token_gaps_s.append(now - last)
                last = now
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        timings.total_s = time.perf_counter() - started

    async def _disaggregated(
        self, request: GenerateRequest, timings: RequestTimings, started: float
    ) -> AsyncIterator[TokenChunk]:
        report = timings.transfer
        decision = decide(
            len(request.prompt_token_ids),
            self.local_prefill_below_tokens,
            self.prefills_in_flight,
            self.max_prefill_backlog,
            request.local_prefill_reason,
        )
        report.remote_prefill, report.decision_reason = decision.remote, decision.reason
        plan = self.plan if decision.remote else (Transport.RECOMPUTE,)
        prefill_reachable = True
        for number, transport in enumerate(plan):
            attempt_started = time.perf_counter()
            attempt = (
                request
                if number == 0
                else replace(request, request_id=f"{request.request_id}.{number}")
            )
            if transport is not Transport.RECOMPUTE:
                if not prefill_reachable:
                    continue  # every transport but recompute needs the prefill pool
                try:
                    result = await self._prefill(attempt, transport)
                except (TimeoutError, Exception) as exc:
                    prefill_reachable = False
                    report.attempts.append(
                        Attempt(
                            transport,
                            False,
                            f"prefill failed: {describe_failure(exc)}",
                            time.perf_counter() - attempt_started,
                        )
                    )
                    continue
                timings.prefill_s += time.perf_counter() - attempt_started
                timings.prefill_engine = result.engine_id
                timings.prefill_cached_tokens = result.num_cached_tokens
                attempt = replace(
                    attempt,
                    kv_transfer_params=result.kv_transfer_params,
                    kv_object=result.kv_object,
                    kv_num_tokens=result.num_prompt_tokens,
                )
                report.transfer_s = result.publish_s
            decode_started = time.perf_counter()
            stream = self.decode.generate(attempt)
            try:
                try:
                    first = await self._first_chunk(stream, transport)
                except TimeoutError:
                    first = TokenChunk(
                        "", [], transfer_failed=f"no first token in {self.transfer_timeout_s:g} s"
                    )
                if first is not None and first.transfer_failed:
                    report.attempts.append(
                        Attempt(
                            transport,
                            False,
                            first.transfer_failed,
                            time.perf_counter() - attempt_started,
                        )
                    )
                    continue
                report.attempts.append(
                    Attempt(transport, True, None, time.perf_counter() - attempt_started)
                )
                if first is not None:
                    timings.decode_first_token_s = time.perf_counter() - decode_started
                    timings.kv_fetch_s = first.kv_fetch_s
                    report.kv_bytes = first.kv_bytes
                    report.transfer_s += first.kv_fetch_s
                if self.on_transfer is not None:
                    self.on_transfer(report)
                if first is None:
                    return
                yield first
                async for chunk in stream:
                    yield chunk
                return
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
        raise RuntimeError("every transport failed, recompute included")

    async def _first_chunk(
        self, stream: AsyncIterator[TokenChunk], transport: Transport
    ) -> TokenChunk | None:
        """The decode stream's first chunk; a transfer that hangs counts as failed."""
        if transport is Transport.RECOMPUTE:
            return await anext(aiter(stream), None)
        async with asyncio.timeout(self.transfer_timeout_s):
            return await anext(aiter(stream), None)

    async def _prefill(self, request: GenerateRequest, transport: Transport) -> PrefillResult:
        assert self.prefill is not None
        self.prefills_in_flight += 1
        try:
            async with asyncio.timeout(self.prefill_timeout_s):
                return await self.prefill.prefill(request, transport)
        finally:
            self.prefills_in_flight -= 1
