"""The engine adapter: one vLLM ``AsyncLLM`` per replica, in a prefill, decode or colocated role.

This is the only module that imports vLLM's engine. It builds the engine from the
arguments and environment :mod:`app.engine.setup` derives from the config, and exposes
three calls the Serve deployments forward:

- ``prefill(request)``: run the prompt with ``max_tokens=1`` and ``do_remote_decode``;
  vLLM keeps the prompt's KV blocks and returns ``kv_transfer_params`` that locate them.
- ``generate(request)``: stream tokens; on a decode replica the request carries those
  params and the connector pulls the KV (NIXL READ) instead of recomputing the prompt.
- ``stats()``: counters the engine's stat logger kept (prefix-cache hits, external
  (transferred) hits, NIXL bytes: :mod:`app.observability.engine_tally`) so callers
  can see what really happened.

The calls that are not requests (leases, scheduling, the cache) are in
:mod:`app.engine.control`.

vLLM runs its engine core in a child process it spawns itself (with ``model.executor``
``uni``, the default, the model runs in that process too); env vars must therefore be
set before the engine is built, which is why the adapter sets them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from app.config import AppConfig
from app.engine import decode_stream, kv_checks
from app.engine.binding import bind_engine
from app.engine.control import EngineControl
from app.engine.first_token import first_token_params, sampled_first_token
from app.engine.kv_events import EventSockets, KvEventReader
from app.engine.process_info import process_info
from app.engine.setup import (
    cpu_binding,
    engine_arguments,
    engine_environment,
    side_channel_host,
)
from app.kv import object_store, read_deadline
from app.kv.failure import FailureKind, TransferFailure
from app.kv.fallback import Transport
from app.kv.kv_read import nixl_read
from app.kv.link_meter import LinkMeter
from app.kv.payload import LOAD_PATH, NUM_TOKENS, SAVE_PATH
from app.net import free_listen_port
from app.observability.engine_metrics import BusyClock, pool_stat_logger
from app.observability.engine_tally import EngineTally
from app.pool.records import EngineStats, GenerateRequest, PrefillResult, Role, Started, TokenChunk
from app.routing.engine_blocks import BlockChanges, EngineBlocks

logger = logging.getLogger("splitserve.engine")


class EngineServer(EngineControl):
    """One vLLM engine in one role; the Serve deployments are thin shells around it.

    ``engine`` is anything with vLLM ``AsyncLLM``'s ``generate`` / ``abort`` /
    ``shutdown``; it is injected so the request handling can be tested without vLLM.
    """

    def __init__(
        self,
        engine: Any,
        role: Role,
        engine_id: str,
        stream_interval_s: float = 0.0,
        stream_messages_per_s: float = 0.0,
        busy: BusyClock | None = None,
        tally: EngineTally | None = None,
    ) -> None:
        self.engine = engine
        self.role = role
        self.engine_id = engine_id
        self.stream_interval_s = stream_interval_s
        self.stream_messages_per_s = stream_messages_per_s
        self.streams = 0  # generate() calls in progress
        self.busy = busy or BusyClock()
        self.tally = tally or EngineTally()
        # Prompt tokens handed to the engine, counted as they arrive (the SLO policy
        # compares them with those the engine prefilled: app.scaling.autoscaling_stats).
        self.arrived_prompt_tokens = 0
        # Whether the prefill replica of this id still lives (a decode replica's fence);
        # None: KV is never refused for its source.
        self.peer_alive: Callable[[str], Awaitable[bool]] | None = None
        # Each prefill replica's measured link into this (decode) engine, per transport.
        self.links: LinkMeter | None = None
        # The engine's KV events, read here (router.prefix_source: kv_events).
        self.kv_events: KvEventReader | None = None

    @property
    def cache_block_tokens(self) -> int:
        """The engine's KV block, in tokens: its prefix cache holds whole blocks (0 when
        the engine does not say)."""
        cache = getattr(getattr(self.engine, "vllm_config", None), "cache_config", None)
        return int(getattr(cache, "block_size", 0) or 0)

    @classmethod
    def start(
        cls, role: Role, config: AppConfig, model_path: str, application: str = ""
    ) -> EngineServer:
        """Build and start a vLLM engine for ``role`` in this process (of Serve ``application``)."""
        from vllm.v1.engine.async_llm import AsyncLLM

        decode_stream.install()  # no answer streams its prompt's text back
        pool = config.pool_for(role)
        engine_id = f"{role.value}-{uuid.uuid4().hex[:12]}"
        swept = object_store.sweep_orphans()
        if swept:
            logger.warning("removed %d KV payload files left by dead replicas", len(swept))
        port = free_listen_port(side_channel_host(config.transport.side_channel_host))
        os.environ.update(engine_environment(role, pool, config, port))
        sockets = EventSockets.make() if config.router.prefix_source == "kv_events" else None
        vllm_config = engine_arguments(
            role, config, model_path, engine_id, sockets.engine_config() if sockets else None
        ).create_engine_config()
        # vLLM's CPU platform turns the `uni` executor into `mp` while it checks the
        # config, which adds a worker process (~0.5 GiB, and a shared-memory queue hop
        # per step) to each engine. Set after that check, `uni` runs the model in the
        # engine-core process; its environment (OpenMP binding, libgomp preload) is
        # inherited from this one, which is what the worker process would have had.
        backend = config.model.executor_backend
        if backend is not None:
            vllm_config.parallel_config.distributed_executor_backend = backend
        # One stat logger: engine metrics to Ray's export labelled by pool
        # (app.observability.engine_metrics), and the few this replica reads to a tally
        # kept as the engine steps (app.observability.engine_tally).
        busy = BusyClock()
        tally = EngineTally()
        engine = AsyncLLM.from_vllm_config(
            vllm_config,
            stat_loggers=[pool_stat_logger(role.value, busy, application, tally)],
        )
        bind_engine(cpu_binding(pool), "prefill" if role is Role.PREFILL else "decode")
        server = cls(
            engine,
            role,
            engine_id,
            pool.stream_interval_ms / 1000,
            pool.stream_messages_per_s,
            busy,
            tally,
        )
        if sockets is not None:
            # the cache's size, as the engine core found it (set on this config at start)
            blocks = EngineBlocks(
                vllm_config.cache_config.block_size,
                capacity=vllm_config.cache_config.num_gpu_blocks or 0,
            )
            server.kv_events = KvEventReader(sockets, blocks)
            server.kv_events.start()
        return server

    async def prefill(
        self, request: GenerateRequest, transport: Transport = Transport.NIXL
    ) -> AsyncIterator[Started | PrefillResult]:
        """Compute the prompt's KV and hand it over by ``transport``.

        Yields :class:`Started` as the engine gets the request, then the result. NIXL:
        the engine keeps the blocks for a decode replica to pull (until pulled, aborted,
        or the lease expires). Object store: the engine writes the blocks to a payload
        file, which is moved into the Ray object store.
        """
        from vllm import SamplingParams

        path = None
        if transport is Transport.OBJECT_STORE:
            path = object_store.new_payload_path("prefill")
            kv: dict[str, Any] = {SAVE_PATH: path}
        elif transport is Transport.NIXL:
            kv = {"do_remote_decode": True}
        else:
            raise ValueError(f"prefill cannot hand KV over by {transport}")
        first_token = request.sample_first_token and transport is Transport.NIXL
        if first_token:  # the answer's first token, sampled as the request asks
            params = first_token_params(request.sampling_params)
            params.extra_args = {**(params.extra_args or {}), "kv_transfer_params": kv}
        else:
            params = SamplingParams(
                max_tokens=1, detokenize=False, extra_args={"kv_transfer_params": kv}
            )
        try:
            yield Started(self.engine_id)
            final = None
            async for output in self._run(request, params):
                final = output
            if final is None:
                raise RuntimeError(f"prefill of {request.request_id} produced no output")
            cached = int(final.num_cached_tokens or 0)
            if path is not None:
                ref, _, publish_s = await object_store.publish(path)
                yield PrefillResult(
                    kv_transfer_params=None,
                    num_prompt_tokens=len(request.prompt_token_ids),
                    kv_object=ref,
                    publish_s=publish_s,
                    num_cached_tokens=cached,
                )
                return
            if not final.kv_transfer_params:
                raise RuntimeError(f"prefill of {request.request_id} returned no KV location")
            sampled = final.outputs[0]
            yield PrefillResult(
                kv_transfer_params=dict(final.kv_transfer_params),
                num_prompt_tokens=len(request.prompt_token_ids),
                num_cached_tokens=cached,
                first_token=sampled_first_token(sampled, request.sampling_params.max_tokens, cached)
                if first_token and sampled.token_ids
                else None,
                block_tokens=self.cache_block_tokens,
            )
        finally:
            if path is not None:
                object_store.remove(path)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Started | TokenChunk]:
        """Stream the request's new tokens, loading transferred KV when the request has some.

        Yields :class:`Started` first, as the engine gets the request. If the transferred
        KV cannot be used, the next and last chunk has ``transfer_failed`` set and no
        tokens, so the caller can fall back. With NIXL, the last chunk carries the KV's
        size and read time as the decode engine's connector recorded them.

        After the first chunk, the next is taken no sooner than :meth:`chunk_interval`
        after the previous one was handed on: meanwhile vLLM merges the steps' new tokens
        into one pending output (``RequestOutputKind.DELTA``), so one message carries
        them all. The first token is never held.
        """
        from vllm.sampling_params import RequestOutputKind

        params = request.sampling_params.clone()
        params.output_kind = RequestOutputKind.DELTA
        kv = request.kv_transfer_params
        path = None
        kv_bytes = 0
        fetch_s = 0.0
        self.streams += 1
        try:
            yield Started(self.engine_id)
            fenced = await kv_checks.fenced(self.engine, request, self.peer_alive, self.links)
            if fenced is not None:
                yield TokenChunk("", [], transfer_failed=fenced)
                return
            late = time.time() - (request.kv_expires_at or float("inf"))
            if kv is not None and late > 0:
                # Prefill's lease on the blocks has run out: they may be freed and reused,
                # and reading them would give wrong KV without any error.
                failure = TransferFailure(
                    FailureKind.KV_EXPIRED,
                    f"the decode replica started the request {late:.1f} s after prefill's "
                    "lease on its KV blocks ran out",
                )
                yield TokenChunk("", [], transfer_failed=failure)
                return
            if request.kv_object is not None:
                path = object_store.new_payload_path("decode")
                try:
                    kv_bytes, fetch_s = await object_store.materialize(request.kv_object, path)
                except Exception as exc:  # lost object, dead owner, bad payload
                    failure = TransferFailure(
                        FailureKind.OBJECT_STORE_GET, f"{type(exc).__name__}: {exc}"
                    )
                    yield TokenChunk("", [], transfer_failed=failure)
                    return
                # The payload is in a file now: this frame no longer pins the object.
                request = replace(request, kv_object=None)
                kv = {LOAD_PATH: path, NUM_TOKENS: request.kv_num_tokens}
                self._measured(request, Transport.OBJECT_STORE, kv_bytes, fetch_s)
            elif kv is not None and request.kv_expires_at is not None:
                # The connector refuses the read if it would start later than this.
                kv = {
                    **kv,
                    read_deadline.READ_BY: request.kv_expires_at,
                    read_deadline.READER: request.request_id,
                }
            if kv is not None:
                params.extra_args = {**(params.extra_args or {}), "kv_transfer_params": kv}
            first = True
            async for output in self._run(request, params):
                completion = output.outputs[0]
                if first and kv and completion.finish_reason == "error":
                    yield TokenChunk(
                        "", [], transfer_failed=await kv_checks.load_failure(self.engine, request)
                    )
                    return
                if output.finished and output.kv_transfer_params:
                    read = nixl_read(output.kv_transfer_params)
                    if read is not None:
                        kv_bytes, fetch_s = read
                        self._measured(request, Transport.NIXL, kv_bytes, fetch_s)
                yield TokenChunk(
                    text=completion.text,
                    token_ids=list(completion.token_ids),
                    finish_reason=completion.finish_reason,
                    stop_reason=completion.stop_reason,
                    num_cached_tokens=int(output.num_cached_tokens or 0),
                    logprobs=completion.logprobs,
                    cumulative_logprob=completion.cumulative_logprob,
                    prompt_logprobs=output.prompt_logprobs if first else None,
                    kv_bytes=kv_bytes if first or output.finished else 0,
                    kv_fetch_s=fetch_s if first or output.finished else 0.0,
                )
                first = False
                interval = self.chunk_interval()
                if interval and not completion.finish_reason:
                    await asyncio.sleep(interval)
        finally:
            self.streams -= 1
            if path is not None:
                object_store.remove(path)

    def _measured(
        self, request: GenerateRequest, transport: Transport, kv_bytes: int, seconds: float
    ) -> None:
        if self.links is not None and request.kv_source:
            self.links.observe(request.kv_source, transport, kv_bytes, seconds)

    def chunk_interval(self) -> float:
        """Seconds between a stream's chunks: streams / budget, capped by the interval."""
        if not self.stream_messages_per_s:
            return self.stream_interval_s
        return min(self.stream_interval_s, self.streams / self.stream_messages_per_s)

    async def _run(self, request: GenerateRequest, params: Any) -> AsyncIterator[Any]:
        finished = False
        self.arrived_prompt_tokens += len(request.prompt_token_ids)
        self.busy.submitted()
        try:
            prompt: dict[str, Any] = {"prompt_token_ids": request.prompt_token_ids}
            if request.cache_salt:
                prompt["cache_salt"] = request.cache_salt
            async for output in self.engine.generate(
                prompt,
                params,
                request.request_id,
                trace_headers=request.trace_headers,
                priority=request.priority,
            ):
                finished = output.finished
                yield output
        finally:
            # A caller that stops listening (client gone, deadline) must not leave the
            # request, and the KV blocks it holds, inside the engine.
            if not finished:
                await self.engine.abort(request.request_id)

    def stats(self) -> EngineStats:
        """Engine counters and scheduler gauges (by vLLM's sample names), as of its last step."""
        return EngineStats(role=self.role, engine_id=self.engine_id, counters=self.tally.counters())

    def process_info(self) -> dict[str, Any]:
        """This replica's processes and side channel (:func:`app.engine.process_info`)."""
        return process_info(self.role)

    async def kv_blocks(
        self, epoch: str | None, since: int, wait_s: float = 0.0
    ) -> BlockChanges | None:
        """What the engine's prefix cache gained and lost since ``since`` of ``epoch``, by
        its KV events (:mod:`app.engine.kv_events`); None when it publishes none. With
        ``wait_s``, a reader that is up to date waits that long at most for a change."""
        reader = self.kv_events
        if reader is None:
            return None
        blocks = reader.blocks
        if wait_s > 0 and epoch == blocks.epoch and since == blocks.version:
            await reader.changed(wait_s)
        return blocks.changes(epoch, since)

    def shutdown(self) -> None:
        if self.kv_events is not None:
            self.kv_events.close()
        self.engine.shutdown()
