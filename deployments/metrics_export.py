"""Reads Ray's metrics export on every node, for the ingress's ``GET /metrics``."""

from __future__ import annotations

import asyncio
import time

from app.metrics_page import render


class RayMetricsExport:
    """Serve ``application``'s series from each alive node's Ray metrics agent, by :func:`render`.

    The agents are the targets Ray's Prometheus service discovery lists (``ray.nodes()``'s
    ``MetricsExportPort``); the list is re-read every ``nodes_ttl_s``. An agent that does
    not answer within ``timeout_s`` is left out; if none answers, :meth:`page` raises.
    """

    def __init__(self, application: str, timeout_s: float = 5.0, nodes_ttl_s: float = 30.0) -> None:
        self.application = application
        self.timeout_s = timeout_s
        self.nodes_ttl_s = nodes_ttl_s
        self._targets: list[str] = []
        self._read_at = 0.0

    async def page(self) -> str:
        import httpx

        targets = await self._agents()
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            answers = await asyncio.gather(
                *(client.get(f"http://{target}/metrics") for target in targets),
                return_exceptions=True,
            )
        texts = [a.text for a in answers if isinstance(a, httpx.Response) and a.is_success]
        if not texts:
            raise RuntimeError(f"no Ray metrics agent answered (tried {', '.join(targets)})")
        return await asyncio.to_thread(render, texts, self.application)

    async def _agents(self) -> list[str]:
        if not self._targets or time.monotonic() - self._read_at > self.nodes_ttl_s:
            self._targets = await asyncio.to_thread(_agent_addresses)
            self._read_at = time.monotonic()
        return self._targets


def _agent_addresses() -> list[str]:
    import ray

    return [
        f"{node['NodeManagerAddress']}:{node['MetricsExportPort']}"
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node["Alive"] and node.get("MetricsExportPort")
    ]
