"""The engine adapter: one vLLM ``AsyncLLM`` per replica, in a prefill, decode or colocated role.

This is the only module that imports vLLM's engine. It builds the engine from the
arguments and environment :mod:`app.engine_setup` derives from the config, and exposes
three calls the Serve deployments forward:

- ``prefill(request)``: run the prompt with ``max_tokens=1`` and ``do_remote_decode``;
  vLLM keeps the prompt's KV blocks and returns ``kv_transfer_params`` that locate them.
- ``generate(request)``: stream tokens; on a decode replica the request carries those
  params and the connector pulls the KV (NIXL READ) instead of recomputing the prompt.
- ``stats()``: counters from the engine's own Prometheus metrics (prefix-cache hits,
  external (transferred) hits, NIXL bytes) so callers can see what really happened.

vLLM runs its engine core in a child process it spawns itself (with ``model.executor``
``uni``, the default, the model runs in that process too); env vars must therefore be
set before the engine is built, which is why the adapter sets them.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from app.config import AppConfig
from app.engine_setup import engine_arguments, engine_environment, free_port, side_channel_host
from app.kv_transport import object_store
from app.kv_transport.fallback import Transport
from app.kv_transport.payload import LOAD_PATH, NUM_TOKENS, SAVE_PATH
from app.records import EngineStats, GenerateRequest, PrefillResult, Role, TokenChunk

# Counters and gauges copied out of vLLM's Prometheus registry by `stats()`.
_STAT_PREFIXES = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
    "vllm:nixl_bytes_transferred",
    "vllm:nixl_xfer_time_seconds",
    "vllm:nixl_num_failed_transfers",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:request_success",
)


def _kv_geometry(engine: Any) -> tuple[int, int]:
    """(block size in tokens, KV bytes per token) of a vLLM engine; zeros if unknown."""
    try:
        vllm_config = engine.vllm_config
        model, parallel = vllm_config.model_config, vllm_config.parallel_config
        per_token = (
            2
            * model.get_num_layers(parallel)
            * model.get_num_kv_heads(parallel)
            * model.get_head_size()
            * model.dtype.itemsize
        )
        return int(vllm_config.cache_config.block_size), int(per_token)
    except AttributeError:
        return 0, 0


class EngineServer:
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
    ) -> None:
        self.engine = engine
        self.role = role
        self.engine_id = engine_id
        self.stream_interval_s = stream_interval_s
        self.stream_messages_per_s = stream_messages_per_s
        self.streams = 0  # generate() calls in progress
        self.block_size, self.kv_bytes_per_token = _kv_geometry(engine)

    @classmethod
    def start(cls, role: Role, config: AppConfig, model_path: str) -> EngineServer:
        """Build and start a vLLM engine for ``role`` in this process."""
        from vllm.v1.engine.async_llm import AsyncLLM

        pool = config.prefill if role is Role.PREFILL else config.decode
        engine_id = f"{role.value}-{uuid.uuid4().hex[:12]}"
        port = free_port(side_channel_host(config.transport.side_channel_host))
        os.environ.update(engine_environment(role, pool, config, port))
        vllm_config = engine_arguments(role, config, model_path, engine_id).create_engine_config()
        # vLLM's CPU platform turns the `uni` executor into `mp` while it checks the
        # config, which adds a worker process (~0.5 GiB, and a shared-memory queue hop
        # per step) to each engine. Set after that check, `uni` runs the model in the
        # engine-core process; its environment (OpenMP binding, libgomp preload) is
        # inherited from this one, which is what the worker process would have had.
        backend = config.model.executor_backend
        if backend is not None:
            vllm_config.parallel_config.distributed_executor_backend = backend
        engine = AsyncLLM.from_vllm_config(vllm_config)
        return cls(
            engine,
            role,
            engine_id,
            pool.stream_interval_ms / 1000,
            pool.stream_messages_per_s,
        )

    async def prefill(
        self, request: GenerateRequest, transport: Transport = Transport.NIXL
    ) -> PrefillResult:
        """Compute the prompt's KV and hand it over by ``transport``.

        NIXL: the engine keeps the blocks for a decode replica to pull (until pulled,
        aborted, or the lease expires). Object store: the engine writes the blocks to a
        payload file, which is moved into the Ray object store.
        """
        from vllm import SamplingParams

        started = time.perf_counter()
        path = None
        if transport is Transport.OBJECT_STORE:
            path = object_store.new_payload_path("prefill")
            kv: dict[str, Any] = {SAVE_PATH: path}
        elif transport is Transport.NIXL:
            kv = {"do_remote_decode": True}
        else:
            raise ValueError(f"prefill cannot hand KV over by {transport}")
        params = SamplingParams(
            max_tokens=1, detokenize=False, extra_args={"kv_transfer_params": kv}
        )
        try:
            final = None
            async for output in self._run(request, params):
                final = output
            if final is None:
                raise RuntimeError(f"prefill of {request.request_id} produced no output")
            if path is not None:
                ref, nbytes, publish_s = await object_store.publish(path)
                return PrefillResult(
                    kv_transfer_params=None,
                    num_prompt_tokens=len(request.prompt_token_ids),
                    seconds=time.perf_counter() - started,
                    kv_object=ref,
                    kv_bytes=nbytes,
                    publish_s=publish_s,
                    engine_id=self.engine_id,
                    num_cached_tokens=int(final.num_cached_tokens or 0),
                )
            if not final.kv_transfer_params:
                raise RuntimeError(f"prefill of {request.request_id} returned no KV location")
            return PrefillResult(
                kv_transfer_params=dict(final.kv_transfer_params),
                num_prompt_tokens=len(request.prompt_token_ids),
                seconds=time.perf_counter() - started,
                engine_id=self.engine_id,
                num_cached_tokens=int(final.num_cached_tokens or 0),
            )
        finally:
            if path is not None:
                object_store.remove(path)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenChunk]:
        """Stream the request's new tokens, loading transferred KV when the request has some.

        If the transferred KV cannot be used, the only chunk is one with
        ``transfer_failed`` set and no tokens, so the caller can fall back.

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
            if request.kv_object is not None:
                path = object_store.new_payload_path("decode")
                try:
                    kv_bytes, fetch_s = await object_store.materialize(request.kv_object, path)
                except Exception as exc:  # lost object, dead owner, bad payload
                    yield TokenChunk(
                        "", [], transfer_failed=f"object store: {type(exc).__name__}: {exc}"
                    )
                    return
                kv = {LOAD_PATH: path, NUM_TOKENS: request.kv_num_tokens}
            elif kv is not None and kv.get("remote_block_ids"):
                kv_bytes = self._nixl_bytes(kv)
            if kv is not None:
                params.extra_args = {**(params.extra_args or {}), "kv_transfer_params": kv}
            first = True
            async for output in self._run(request, params):
                completion = output.outputs[0]
                if first and kv and completion.finish_reason == "error":
                    yield TokenChunk(
                        "", [], transfer_failed="the decode engine could not load the KV"
                    )
                    return
                yield TokenChunk(
                    text=completion.text,
                    token_ids=list(completion.token_ids),
                    finish_reason=completion.finish_reason,
                    stop_reason=completion.stop_reason,
                    num_cached_tokens=int(output.num_cached_tokens or 0),
                    logprobs=completion.logprobs,
                    cumulative_logprob=completion.cumulative_logprob,
                    prompt_logprobs=output.prompt_logprobs if first else None,
                    kv_bytes=kv_bytes if first else 0,
                    kv_fetch_s=fetch_s if first else 0.0,
                    engine_id=self.engine_id if first else "",
                )
                first = False
                interval = self.chunk_interval()
                if interval and not completion.finish_reason:
                    await asyncio.sleep(interval)
        finally:
            self.streams -= 1
            if path is not None:
                object_store.remove(path)

    def chunk_interval(self) -> float:
        """Seconds between a stream's chunks: streams / budget, capped by the interval."""
        if not self.stream_messages_per_s:
            return self.stream_interval_s
        return min(self.stream_interval_s, self.streams / self.stream_messages_per_s)

    def _nixl_bytes(self, kv: dict[str, Any]) -> int:
        """Bytes NIXL moves for these params: whole blocks of every layer."""
        blocks = sum(len(group) for group in kv.get("remote_block_ids") or ())
        return blocks * self.block_size * self.kv_bytes_per_token

    async def _run(self, request: GenerateRequest, params: Any) -> AsyncIterator[Any]:
        finished = False
        try:
            async for output in self.engine.generate(
                {"prompt_token_ids": request.prompt_token_ids}, params, request.request_id
            ):
                finished = output.finished
                yield output
        finally:
            # A caller that stops listening (client gone, deadline) must not leave the
            # request, and the KV blocks it holds, inside the engine.
            if not finished:
                await self.engine.abort(request.request_id)

    def stats(self) -> EngineStats:
        """Engine counters from this process's vLLM Prometheus metrics."""
        from prometheus_client import REGISTRY

        counters: dict[str, float] = {}
        for metric in REGISTRY.collect():
            if not metric.name.startswith(_STAT_PREFIXES):
                continue
            for sample in metric.samples:
                if sample.name.endswith("_created") or sample.name.endswith("_bucket"):
                    continue
                counters[sample.name] = counters.get(sample.name, 0.0) + sample.value
        return EngineStats(role=self.role, engine_id=self.engine_id, counters=counters)

    async def all_blocks_free(self) -> bool:
        """True when the engine holds no KV block for any request.

        Asks vLLM to reset its prefix cache, which it refuses while any block is in use
        (running requests, or blocks kept for a remote decode to pull). Side effect: the
        prefix cache is emptied, so call it from tests and diagnostics, not per request.
        """
        return bool(await self.engine.reset_prefix_cache())

    def process_info(self) -> dict[str, Any]:
        """PID and resident memory (bytes) of this replica and the engine processes it spawned."""
        import psutil

        me = psutil.Process()
        rss = me.memory_info().rss
        children = []
        for child in me.children(recursive=True):
            try:
                rss += child.memory_info().rss
                children.append(child.pid)
            except psutil.NoSuchProcess:
                continue
        return {"pid": me.pid, "rss_bytes": rss, "children": children}

    def shutdown(self) -> None:
        self.engine.shutdown()
