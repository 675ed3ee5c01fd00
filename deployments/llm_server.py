"""The Prefill / Decode / Colocated deployment: one vLLM engine per replica."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from app.config import AppConfig
from app.engine import EngineServer
from app.kv_transport.fallback import Transport
from app.model_source import resolve_model
from app.records import EngineStats, GenerateRequest, PrefillResult, Role, Started, TokenChunk

logger = logging.getLogger("ray.serve")


class LLMServer:
    """A Serve replica hosting one `EngineServer` in ``role``."""

    def __init__(self, role: str, config: AppConfig) -> None:
        self.role = Role(role)
        model_path = resolve_model(config.model.source)
        self.server = EngineServer.start(self.role, config, model_path)
        logger.info("%s engine %s ready", self.role.value, self.server.engine_id)

    async def prefill(
        self, request: GenerateRequest, transport: Transport = Transport.NIXL
    ) -> AsyncIterator[Started | PrefillResult]:
        async for item in self.server.prefill(request, transport):
            yield item

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Started | TokenChunk]:
        async for chunk in self.server.generate(request):
            yield chunk

    def stats(self) -> EngineStats:
        return self.server.stats()

    def record_routing_stats(self) -> dict[str, Any]:
        """What the KV-capacity router ranks decode replicas by (Serve polls it)."""
        counters = self.server.stats().counters
        return {
            "kv_cache_usage": counters.get("vllm:kv_cache_usage_perc", 0.0),
            "running": counters.get("vllm:num_requests_running", 0.0),
            "waiting": counters.get("vllm:num_requests_waiting", 0.0),
        }

    async def all_blocks_free(self) -> bool:
        return await self.server.all_blocks_free()

    def process_info(self) -> dict[str, Any]:
        """PIDs, RSS and the address of the Ray node this replica runs on."""
        import ray.util

        node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return {**self.server.process_info(), "node_ip": node_ip}

    async def check_health(self) -> None:
        await self.server.engine.check_health()

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.shutdown()
