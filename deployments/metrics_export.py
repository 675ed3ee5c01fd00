"""Reads Ray's metrics export on every node, for the ingress's ``GET /metrics``."""

from __future__ import annotations

import asyncio
import logging
import time

from app.observability.metrics_page import render

logger = logging.getLogger("ray.serve")


class RayMetricsExport:
    """Serve ``application``'s series from each alive node's Ray metrics agent, by :func:`render`.

    The agents are the targets Ray's Prometheus service discovery lists (``ray.nodes()``'s
    ``MetricsExportPort``); the list is re-read every ``nodes_ttl_s``. An agent that does
    not answer within ``timeout_s`` is left out, with a warning naming it; if none answers,
    :meth:`page` raises.

    A page is reused for ``max_age_s``, and scrapes that arrive together share one read:
    the agents' text is about a megabyte per node, and Ray refreshes it only every
    ``metrics_report_interval_ms`` (10 s by default), so a scraper polling several times
    a second (AIPerf does) would otherwise spend the ingress's CPU for nothing new.
    """

    def __init__(
        self,
        application: str,
        timeout_s: float = 5.0,
        nodes_ttl_s: float = 30.0,
        max_age_s: float = 2.0,
    ) -> None:
        self.application = application
        self.timeout_s = timeout_s
        self.nodes_ttl_s = nodes_ttl_s
        self.max_age_s = max_age_s
        self._targets: list[str] = []
        self._read_at = 0.0
        self._page = ""
        self._page_at = -float("inf")
        self._lock = asyncio.Lock()

    async def page(self) -> str:
        async with self._lock:
            if time.monotonic() - self._page_at > self.max_age_s:
                self._page = await self._read()
                self._page_at = time.monotonic()
            return self._page

    async def _read(self) -> str:
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
        missing = [
            target
            for target, answer in zip(targets, answers, strict=True)
            if not (isinstance(answer, httpx.Response) and answer.is_success)
        ]
        if missing:  # a node's series are missing from this page: say so
            logger.warning("/metrics without the Ray metrics agents of %s", ", ".join(missing))
        return await asyncio.to_thread(render, texts, self.application)

    async def _agents(self) -> list[str]:
        if not self._targets or time.monotonic() - self._read_at > self.nodes_ttl_s:
            self._targets = await asyncio.to_thread(agent_addresses)
            self._read_at = time.monotonic()
        return self._targets


def agent_addresses() -> list[str]:
    import ray

    return [
        f"{node['NodeManagerAddress']}:{node['MetricsExportPort']}"
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node["Alive"] and node.get("MetricsExportPort")
    ]
