"""The Ingress deployment: the OpenAI HTTP API in front of the pools."""

from __future__ import annotations

import logging
import os
from typing import Any

from ray import serve

from app.config import AppConfig, Mode
from app.cpu_affinity import pin_process
from app.http_api import OpenAIServer
from app.kv_transport.fallback import nixl_installed, transfer_plan
from app.kv_transport.transfer_metrics import RayTransferMetrics
from app.model_source import resolve_model
from app.openai_requests import RequestParser
from app.orchestrator import Orchestrator
from app.request_metrics import RayRequestMetrics
from deployments.cluster_env import missing_cluster_env
from deployments.pool_client import ServePoolClient

logger = logging.getLogger("ray.serve")


@serve.ingress()
class Ingress:
    """Parses and tokenizes requests once, then drives prefill and decode."""

    def __init__(self, config: AppConfig, decode: Any, prefill: Any = None) -> None:
        from transformers import AutoTokenizer

        if config.ingress.cpu_affinity is not None:
            cores = pin_process(config.ingress.cpu_affinity, "ingress.cpu_affinity")
            logger.info("ingress bound to cores %s", sorted(cores))

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.model.source))
        parser = RequestParser(tokenizer, config.model.name, config.model.max_model_len)
        metrics = RayTransferMetrics()
        grpc = config.request_path.grpc
        orchestrator = Orchestrator(
            config.mode,
            decode=ServePoolClient(decode, grpc),
            prefill=ServePoolClient(prefill, grpc) if config.mode is Mode.DISAGGREGATED else None,
            plan=transfer_plan(config.transport.kind, nixl_installed()),
            prefill_timeout_s=config.transport.prefill_timeout_s,
            transfer_timeout_s=config.transport.transfer_timeout_s,
            local_prefill_below_tokens=config.router.local_prefill_below_tokens,
            max_prefill_backlog=config.router.max_prefill_backlog,
            on_transfer=metrics.record,
        )
        missing = missing_cluster_env()
        if missing:
            logger.warning(
                "Ray was started without %s: requests reach this ingress only through "
                "Serve's proxy, and by its slower path (docs/performance.md). Export "
                "them before `serve run` or `ray start`, as `make run` does.",
                " ".join(missing),
            )
        api_key = os.environ.get("SPLITSERVE_API_KEY") or config.ingress.api_key
        self._server = OpenAIServer(
            parser, orchestrator, config.ingress, api_key, on_complete=RayRequestMetrics().record
        )

    def __serve_build_asgi_app__(self) -> Any:
        return self._server.asgi_app()
