"""How one engine is set up for its role: vLLM engine arguments, KV connectors, environment.

Pure translation of the validated config into what vLLM needs: ``AsyncEngineArgs``, the
KV transfer config (NixlConnector as ``kv_producer`` / ``kv_consumer``, the object-store
connector, or both behind vLLM's MultiConnector) and the environment variables the
engine's child processes inherit (core binding, KV cache size, NIXL side channel and
progress thread, UCX transports and network devices).
:class:`app.engine.server.EngineServer` applies them.
"""

from __future__ import annotations

from typing import Any, Literal

from app.config import AppConfig, PoolConfig
from app.engine import core_claim
from app.kv import lease_release, nixl_progress, read_deadline
from app.kv.fallback import Transport, engine_transports, nixl_installed
from app.net import address_in, interface_of, is_loopback, is_network
from app.pool.records import Role


def _on_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def side_channel_host(configured: str) -> str:
    """The NIXL handshake address: as configured; this host's address in the network for
    a network (``10.1.0.0/16``, the cluster's own); this Ray node's address for ``auto``."""
    if is_network(configured):
        return address_in(configured)[0]
    if configured != "auto":
        return configured
    import ray.util

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def cpu_binding(pool: PoolConfig, on_gpu: bool | None = None) -> str | None:
    """The cores ``pool``'s engines are bound to here: its ``cpu_binding`` on a host
    without a GPU; on a GPU host only if ``cpu_binding_on_gpu`` asks (else None, vLLM's
    and the OS's choice). Alternatives (``"0|1"``): the set this replica claimed
    (:mod:`app.engine.core_claim`)."""
    if pool.cpu_binding is None:
        return None
    if not pool.cpu_binding_on_gpu and (_on_gpu() if on_gpu is None else on_gpu):
        return None
    return core_claim.claim(pool.cpu_binding)


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
    binding = cpu_binding(pool)
    if binding is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = binding
    if config.tracing.otlp_endpoint is not None and config.tracing.engine_spans:
        # vLLM's exporter speaks gRPC unless told; tracing.otlp_endpoint is OTLP/HTTP.
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
        env["OTEL_SERVICE_NAME"] = f"{config.tracing.service_name}-{role.value}"
    if role is not Role.COLOCATED:
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = side_channel_host(config.transport.side_channel_host)
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_channel_port)
        env[nixl_progress.ENV] = "1" if config.transport.nixl_progress_thread else "0"
        env[nixl_progress.POLL_ENV] = str(config.transport.nixl_progress_poll_ms * 1000)
        if config.transport.ucx_tls:
            env["UCX_TLS"] = config.transport.ucx_tls
        devices = ucx_net_devices(
            config.transport.ucx_net_devices,
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"],
            on_network=is_network(config.transport.side_channel_host),
        )
        if devices is not None:
            env["UCX_NET_DEVICES"] = devices
    return env


def ucx_net_devices(
    configured: str | None, side_channel: str, on_network: bool = False
) -> str | None:
    """UCX_NET_DEVICES for an engine whose NIXL side channel is ``side_channel``: as
    configured; else ``lo`` for a loopback side channel (UCX's TCP transport would listen
    on every interface, answering anyone who has a worker address); else, when the side
    channel was given as a network (``on_network``), the interface holding its address,
    so UCX too stays on the cluster's network; else None (UCX's default: every device)."""
    if configured is not None:
        return configured
    if is_loopback(side_channel):
        return "lo"
    if on_network:
        interface = interface_of(side_channel)
        if interface is None:
            raise ValueError(f"no interface on this host holds {side_channel}")
        return interface
    return None


def kv_transfer_config(role: Role, config: AppConfig, engine_id: str) -> Any:
    """The vLLM KV connector setup for ``role``: NIXL, the object store, or both."""
    from vllm.config import KVTransferConfig

    if role is Role.COLOCATED:
        return None
    device = config.transport.kv_buffer_device
    if device == "auto":
        device = "cuda" if _on_gpu() else "cpu"
    kv_role: Literal["kv_producer", "kv_consumer"] = (
        "kv_producer" if role is Role.PREFILL else "kv_consumer"
    )
    connectors: list[dict[str, Any]] = []
    for transport in engine_transports(config.transport.kind, nixl_installed()):
        if transport is Transport.NIXL:
            from app.kv import timed_nixl

            timed_nixl.register()
            connectors.append(
                {
                    # vLLM's NixlConnector, recording each request's read (bytes, time).
                    "kv_connector": timed_nixl.NAME,
                    "kv_connector_module_path": timed_nixl.__name__,
                    "kv_role": kv_role,
                    "kv_buffer_device": device,
                    "kv_connector_extra_config": {"kv_lease_duration": config.transport.kv_lease_s},
                }
            )
        else:
            connectors.append(
                {
                    "kv_connector": "SplitserveObjectStoreConnector",
                    "kv_connector_module_path": "app.kv.object_store_connector",
                    "kv_role": kv_role,
                }
            )
    # A KV load failure fails the engine request (finish_reason "error") instead of
    # recomputing inside the engine: the orchestrator then tries the next transport
    # of the chain, whose last step is an explicit local recompute.
    if len(connectors) == 1:
        return KVTransferConfig(**connectors[0], engine_id=engine_id, kv_load_failure_policy="fail")
    return KVTransferConfig(
        kv_connector="MultiConnector",
        kv_role=kv_role,
        kv_buffer_device=device,
        engine_id=engine_id,
        kv_load_failure_policy="fail",
        kv_connector_extra_config={"connectors": connectors},
    )


def engine_arguments(
    role: Role, config: AppConfig, model_path: str, engine_id: str, kv_events: Any = None
) -> Any:
    """vLLM ``AsyncEngineArgs`` for one replica of ``role``; ``kv_events``: vLLM's
    ``KVEventsConfig`` where the engine publishes its prefix cache's changes."""
    from vllm.config import StructuredOutputsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    model = config.model
    kv_transfer = kv_transfer_config(role, config, engine_id)
    # Prefill engines that keep NIXL blocks can free a failed attempt's at once; decode
    # engines that read them say which reads they refused as late.
    nixl = Transport.NIXL in engine_transports(config.transport.kind, nixl_installed())
    extension = ""
    if nixl and role is Role.PREFILL:
        extension = lease_release.EXTENSION
    elif nixl and role is Role.DECODE:
        extension = read_deadline.EXTENSION
    pool = config.pool_for(role)
    return AsyncEngineArgs(
        model=model_path,
        revision=model.revision,
        tokenizer_revision=model.revision,
        served_model_name=[model.name],
        max_model_len=model.max_model_len,
        dtype=model.dtype,
        enforce_eager=model.enforce_eager,
        block_size=model.block_size,
        enable_prefix_caching=model.enable_prefix_caching,
        num_gpu_blocks_override=model.kv_cache_blocks,
        gpu_memory_utilization=model.gpu_memory_utilization,
        tensor_parallel_size=model.tensor_parallel_size,
        seed=model.seed,
        max_num_seqs=model.max_num_seqs,
        max_num_batched_tokens=pool.max_num_batched_tokens,
        long_prefill_token_threshold=pool.long_prefill_token_threshold,
        kv_transfer_config=kv_transfer,
        kv_events_config=kv_events,
        worker_extension_cls=extension,
        # Priority classes: the engines run the class's priority first.
        scheduling_policy="priority" if config.priority.enabled else "fcfs",
        # The engine's own span (vLLM's llm_request) in the request's trace.
        otlp_traces_endpoint=(
            config.tracing.otlp_endpoint if config.tracing.engine_spans else None
        ),
        structured_outputs_config=StructuredOutputsConfig(
            backend=model.structured_outputs_backend,
            reasoning_parser=config.openai.reasoning_parser or "",
        ),
    )


def ingress_vllm_config(config: AppConfig, model_path: str) -> Any:
    """The ``VllmConfig`` vLLM's OpenAI layer reads in the ingress (which runs no engine)."""
    return engine_arguments(Role.COLOCATED, config, model_path, "ingress").create_engine_config()
