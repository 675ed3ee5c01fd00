"""Turns the YAML's `args:` into the Serve application graph (the YAML `import_path`)."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.config import RequestRouterConfig
from ray.serve.deployment import Deployment

from app.config import AppConfig, Mode
from app.model.source import resolve_model
from deployments.ingress import Ingress
from deployments.llm_server import LLMServer
from deployments.replicas import POOL_NAMES


def build_app(args: dict[str, Any] | AppConfig | None = None) -> Application:
    """Build the application for ``args`` (validated strictly; errors name the field)."""
    config = args if isinstance(args, AppConfig) else AppConfig.model_validate(args or {})
    # Generate a builtin model once here rather than in every replica at once.
    resolve_model(config.model.source)
    if config.mode is Mode.DISAGGREGATED:
        prefill = _pool("prefill", config)
        # Decode replicas warm up their pair through the prefill pool (app/engine/warmup.py).
        decode = _pool("decode", config, prefill)
    else:
        prefill = None
        decode = _pool("colocated", config)
    ingress: Deployment = serve.deployment()(Ingress)
    options = with_env(config.ingress.to_serve_options(), config)
    return ingress.options(name="Ingress", **options).bind(config, decode, prefill)


def with_env(options: dict[str, Any], config: AppConfig) -> dict[str, Any]:
    """``options`` with the request path's environment added to the replicas' runtime env."""
    env = config.request_path.replica_env()
    if env:
        actor = options["ray_actor_options"]
        actor["runtime_env"] = {"env_vars": env}
    return options


def _router_config(**fields: Any) -> dict[str, Any]:
    return {"request_router_config": RequestRouterConfig(**fields)}


def _router_options(role: str, config: AppConfig) -> dict[str, Any]:
    router = config.router
    if role in ("prefill", "colocated") and router.prefill_policy == "prefix_affinity":
        return _router_config(
            request_router_class="deployments.request_routers:PrefixAffinityRouter",
            request_router_kwargs={
                "block_tokens": router.prefix_block_tokens,
                "max_imbalance": router.max_imbalance,
                "pool": role,
                "prefix_source": router.prefix_source,
            },
        )
    if role == "decode" and router.decode_policy == "kv_capacity":
        return _router_config(
            request_router_class="deployments.request_routers:KVCapacityRouter",
            request_router_kwargs={
                "block_tokens": router.prefix_block_tokens,
                "max_imbalance": router.max_imbalance,
                "pool": role,
                "prefix_source": router.prefix_source,
            },
            request_routing_stats_period_s=1.0,
        )
    return {}


def _pool(role: str, config: AppConfig, prefill: Application | None = None) -> Application:
    pool = config.pool_for(role)
    # The engines never check the key: their replicas' init args (in GCS, on the
    # dashboard) do not hold it.
    config = config.model_copy(update={"ingress": config.ingress.without_key()})
    deployment: Deployment = serve.deployment()(LLMServer)
    return deployment.options(
        name=POOL_NAMES[role],
        **with_env(pool.to_serve_options(), config),
        **_router_options(role, config),
        # Engines take a while to load; give Serve's health check room.
        health_check_period_s=10,
        health_check_timeout_s=60,
    ).bind(role, config, prefill)
