"""The engine adapter: one vLLM ``AsyncLLM`` per replica, in a prefill, decode or colocated role.

This is the only module that imports vLLM's engine. It turns the validated config into
vLLM engine arguments (NixlConnector as ``kv_producer`` / ``kv_consumer``), sets the
process environment the engine's child processes inherit (core binding, KV cache size,
NIXL side channel), and exposes three calls the Serve deployments forward:

- ``prefill(request)``: run the prompt with ``max_tokens=1`` and ``do_remote_decode``;
  vLLM keeps the prompt's KV blocks and returns ``kv_transfer_params`` that locate them.
- ``generate(request)``: stream tokens; on a decode replica the request carries those
  params and the connector pulls the KV (NIXL READ) instead of recomputing the prompt.
- ``stats()``: counters from the engine's own Prometheus metrics (prefix-cache hits,
  external (transferred) hits, NIXL bytes) so callers can see what really happened.

vLLM runs its engine core in a child process it spawns itself; env vars must therefore
be set before the engine is built, which is why the adapter owns them.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from app.config import AppConfig, PoolConfig
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


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (for the NIXL side channel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _on_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def engine_environment(
    role: Role, pool: PoolConfig, config: AppConfig, side_channel_port: int
) -> dict[str, str]:
    """Environment variables the engine's processes must see, for this role."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(config.model.kv_cache_gib),
        # The replica process is the engine's only client; a console progress bar or
        # usage report has nowhere useful to go.
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if pool.cpu_binding is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = pool.cpu_binding
    if role is not Role.COLOCATED:
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = config.transport.side_channel_host
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_channel_port)
    return env


def engine_arguments(role: Role, config: AppConfig, model_path: str, engine_id: str) -> Any:
    """vLLM ``AsyncEngineArgs`` for one replica of ``role``."""
    from vllm.config import KVTransferConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    model = config.model
    kv_transfer = None
    if role is not Role.COLOCATED:
        device = config.transport.kv_buffer_device
        if device == "auto":
            device = "cuda" if _on_gpu() else "cpu"
        kv_transfer = KVTransferConfig(
            kv_connector="NixlConnector",
            kv_role="kv_producer" if role is Role.PREFILL else "kv_consumer",
            kv_buffer_device=device,
            engine_id=engine_id,
            kv_connector_extra_config={"kv_lease_duration": config.transport.kv_lease_s},
            # Last resort of the fallback chain: when the KV cannot be pulled (prefill
            # replica gone, peer unreachable, transfer failed), decode recomputes the
            # prompt locally and the client still gets its answer.
            kv_load_failure_policy="recompute",
        )
    return AsyncEngineArgs(
        model=model_path,
        served_model_name=[model.name],
        max_model_len=model.max_model_len,
        dtype=model.dtype,
        enforce_eager=model.enforce_eager,
        block_size=model.block_size,
        enable_prefix_caching=model.enable_prefix_caching,
        gpu_memory_utilization=model.gpu_memory_utilization,
        tensor_parallel_size=model.tensor_parallel_size,
        seed=model.seed,
        max_num_seqs=model.max_num_seqs,
        kv_transfer_config=kv_transfer,
    )


class EngineServer:
    """One vLLM engine in one role; the Serve deployments are thin shells around it.

    ``engine`` is anything with vLLM ``AsyncLLM``'s ``generate`` / ``abort`` /
    ``shutdown``; it is injected so the request handling can be tested without vLLM.
    """

    def __init__(self, engine: Any, role: Role, engine_id: str) -> None:
        self.engine = engine
        self.role = role
        self.engine_id = engine_id

    @classmethod
    def start(cls, role: Role, config: AppConfig, model_path: str) -> EngineServer:
        """Build and start a vLLM engine for ``role`` in this process."""
        from vllm.v1.engine.async_llm import AsyncLLM

        pool = config.prefill if role is Role.PREFILL else config.decode
        engine_id = f"{role.value}-{uuid.uuid4().hex[:12]}"
        port = free_port(config.transport.side_channel_host)
        os.environ.update(engine_environment(role, pool, config, port))
        args = engine_arguments(role, config, model_path, engine_id)
        return cls(AsyncLLM.from_engine_args(args), role, engine_id)

    async def prefill(self, request: GenerateRequest) -> PrefillResult:
        """Compute the prompt's KV and keep it for a decode replica to pull."""
        from vllm import SamplingParams

        started = time.perf_counter()
        params = SamplingParams(
            max_tokens=1,
            detokenize=False,
            extra_args={"kv_transfer_params": {"do_remote_decode": True}},
        )
        final = None
        async for output in self._run(request, params):
            final = output
        if final is None or not final.kv_transfer_params:
            raise RuntimeError(f"prefill of {request.request_id} returned no kv_transfer_params")
        return PrefillResult(
            kv_transfer_params=dict(final.kv_transfer_params),
            num_prompt_tokens=len(request.prompt_token_ids),
            seconds=time.perf_counter() - started,
        )

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenChunk]:
        """Stream the request's new tokens, pulling remote KV when the request says so."""
        from vllm.sampling_params import RequestOutputKind

        params = request.sampling_params.clone()
        params.output_kind = RequestOutputKind.DELTA
        if request.kv_transfer_params is not None:
            params.extra_args = {
                **(params.extra_args or {}),
                "kv_transfer_params": request.kv_transfer_params,
            }
        async for output in self._run(request, params):
            completion = output.outputs[0]
            yield TokenChunk(
                text=completion.text,
                token_ids=list(completion.token_ids),
                finish_reason=completion.finish_reason,
                stop_reason=completion.stop_reason,
                num_prompt_tokens=len(output.prompt_token_ids or ()),
                num_cached_tokens=int(output.num_cached_tokens or 0),
            )

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
