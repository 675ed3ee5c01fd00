"""The Ingress deployment: the OpenAI HTTP API in front of the pools."""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray import serve

from app.api.admission_metrics import RayAdmissionMetrics
from app.api.engine_client import PoolEngineClient
from app.api.http_api import OpenAIServer
from app.api.openai_serving import build_serving
from app.api.readiness import Readiness
from app.config import AppConfig, Mode
from app.cpu_affinity import pin_process
from app.engine.setup import ingress_vllm_config
from app.flow.orchestrator import Orchestrator
from app.flow.request_metrics import RayRequestMetrics
from app.flow.request_timings import RequestTimings
from app.flow.transfer_metrics import RayTransferMetrics
from app.kv.fallback import nixl_installed, transfer_plan
from app.model.source import resolve_model
from app.observability.tracing import Tracing
from app.pool.chunk_receiver import ChunkReceiver
from app.routing.decode_affinity import shared
from app.scaling.demand import DemandMeter
from deployments.cluster_env import missing_cluster_env
from deployments.metrics_export import RayMetricsExport
from deployments.pool_client import ServePoolClient
from deployments.pool_probe import ServePoolProbe, serving_now
from deployments.prefix_index_reader import PrefixIndexReader, indexed_pools
from deployments.serve_logging import keeping_serve_logs

logger = logging.getLogger("ray.serve")

# How long the constructor waits for the pools' first answer.
FIRST_LOOK_S = 2.0


async def serve_http_host() -> str:
    """The address Serve's HTTP servers bind (``http_options.host``): its proxies' and,
    with direct ingress, this replica's own."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    options = await controller.get_http_config.remote()
    return str(options.host)


@serve.ingress()
class Ingress:
    """vLLM's OpenAI layer in front; its engine requests drive prefill, then decode."""

    @keeping_serve_logs  # vLLM's logging set-up closes Serve's log handler
    async def __init__(self, config: AppConfig, decode: Any, prefill: Any = None) -> None:  # type: ignore[misc]
        api_keys = config.ingress.keys()  # the environment's, the file's or the config's
        # No API open to the network without a key, before anything is loaded.
        config.ingress.check_exposure(await serve_http_host(), api_keys)
        if config.ingress.cpu_affinity is not None:
            cores = pin_process(config.ingress.cpu_affinity, "ingress.cpu_affinity")
            logger.info("ingress bound to cores %s", sorted(cores))

        model_path = resolve_model(config.model.source)
        application = serve.get_replica_context().app_name
        grpc = config.request_path.grpc
        # Ready only once every pool has a warm replica serving, as the pools say.
        if config.mode is Mode.DISAGGREGATED:
            handles = {"prefill": prefill, "decode": decode}
            streaming = "decode"
        else:
            handles = {"colocated": decode}
            streaming = "colocated"
        self._readiness = Readiness(tuple(handles), streaming, ServePoolProbe(application, handles))
        # router.prefix_source kv_events: the routers (in this process) read the pools'
        # engines' prefix caches, which this reads from them.
        indexes = indexed_pools(config, handles)
        self._prefix_reader = PrefixIndexReader(handles, indexes) if indexes else None
        if self._prefix_reader is not None:
            self._prefix_reader.start()
        # The decode (or colocated) replicas on this host push their chunks here.
        self._chunks = (
            ChunkReceiver(ray.get_runtime_context().get_node_id())
            if config.request_path.direct_stream
            else None
        )
        plan = transfer_plan(config.transport.kind, nixl_installed())
        metrics = RayTransferMetrics(application, plan)
        request_metrics = RayRequestMetrics(application)
        orchestrator = Orchestrator(
            config.mode,
            decode=ServePoolClient(decode, grpc, receiver=self._chunks),
            prefill=(
                ServePoolClient(prefill, grpc, on_release=metrics.released)
                if config.mode is Mode.DISAGGREGATED
                else None
            ),
            plan=plan,
            timeouts=config.transport,
            local_prefill_below_tokens=config.router.local_prefill_below_tokens,
            max_prefill_backlog=config.router.max_prefill_backlog,
            first_token_on_prefill=config.router.first_token_on_prefill,
            migration=config.migration,
            on_transfer=metrics.record,
            on_token_gap=request_metrics.token_gap,
            prefill_serving=lambda: serving_now(prefill, self._readiness.serving("prefill")),
            # Filled by the decode router (deployments.request_routers) in this process.
            decode_affinity=(
                shared(
                    config.router.prefix_block_tokens,
                    config.router.max_imbalance,
                    indexes.get("decode"),
                )
                if config.router.decode_policy == "kv_capacity"
                else None
            ),
        )
        # What the SLO policy's model check reads (record_autoscaling_stats).
        self._demand = DemandMeter()

        def completed(timings: RequestTimings) -> None:
            request_metrics.record(timings)
            self._demand.completed(
                timings.prompt_tokens, timings.output_tokens, timings.disaggregated
            )

        engine_client = PoolEngineClient(
            ingress_vllm_config(config, model_path),
            orchestrator,
            config.ingress.request_timeout_s,
            on_complete=completed,
            on_unfinished=request_metrics.unfinished,
        )
        serving = build_serving(engine_client, config, model_path)
        missing = missing_cluster_env()
        if missing:
            logger.warning(
                "Ray was started without %s: requests reach this ingress only through "
                "Serve's proxy, and by its slower path (docs/performance.md). Export "
                "them before `serve run` or `ray start`, as `make run` does.",
                " ".join(missing),
            )
        self._server = OpenAIServer(
            serving,
            config.ingress,
            api_keys,
            metrics_page=RayMetricsExport(application).page,
            on_arrival=self._demand.arrived,
            readiness=self._readiness,
            on_refuse=RayAdmissionMetrics(application).refused,
            tracing=Tracing(config.tracing, application),
            priority=config.priority,
        )
        # Ask the pools once before Serve routes here: an ingress replica added to a
        # running app (a redeploy, a scale-up) starts ready instead of refusing its
        # first requests for a probe interval. At the app's start the pools are still
        # loading: it starts "starting" and goes on asking (app.api.readiness).
        await self._readiness.first_look(FIRST_LOOK_S)

    def __serve_build_asgi_app__(self) -> Any:
        return self._server.asgi_app()

    def stream_counts(self) -> dict[str, int]:
        """Chunks the replicas on this host pushed here (app.pool.chunk_receiver), and of
        them those whose stream had already ended; empty without the direct stream."""
        if self._chunks is None:
            return {}
        return {"received": self._chunks.received, "undeliverable": self._chunks.undeliverable}

    async def __del__(self) -> None:
        """Serve's last call to a stopping ingress: its socket and reader go with it."""
        chunks = getattr(self, "_chunks", None)
        if chunks is not None:
            chunks.close()
        reader = getattr(self, "_prefix_reader", None)
        if reader is not None:
            reader.close()

    def record_autoscaling_stats(self) -> dict[str, float]:
        """The load arriving here and its mix over the last window (app.scaling.demand); Serve
        polls it when the ingress has an ``autoscaling_config``, for the SLO policy's
        model check (deployments.slo_autoscaler)."""
        return self._demand.figures()
