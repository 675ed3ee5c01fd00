"""The Prefill / Decode / Colocated deployment: one vLLM engine per replica."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from ray import serve

from app.config import AppConfig
from app.engine.server import EngineServer
from app.engine.warmup import WarmupReport, warm_engine, warm_pair, warm_pair_from_prefill
from app.kv.fallback import Transport, engine_transports, nixl_installed
from app.kv.lease_release import Release
from app.kv.link_meter import LinkMeter, ray_link_export
from app.model.source import resolve_model
from app.observability.engine_metrics import keep_gauges_alive
from app.pool.chunk_sender import ChunkSender
from app.pool.records import (
    BlocksQuery,
    DirectEnd,
    EngineStats,
    GenerateRequest,
    KvRelease,
    PrefillResult,
    Role,
    Started,
    TokenChunk,
)
from app.routing.engine_blocks import BlockChanges
from app.scaling.autoscaling_stats import Snapshot, WindowStats
from deployments.pool_client import ServePoolClient
from deployments.pool_probe import ReplicaLiveness
from deployments.replicas import POOL_NAMES, replica_ids, running_replicas
from deployments.serve_logging import keeping_serve_logs

logger = logging.getLogger("ray.serve")


class LLMServer:
    """A Serve replica hosting one `EngineServer` in ``role``, warm before it is ready.

    ``prefill`` (decode replicas of a disaggregated app) is the Prefill deployment's
    handle, used only to warm up the pair (:mod:`app.engine.warmup`).
    """

    @keeping_serve_logs  # vLLM's logging set-up closes Serve's log handler
    async def __init__(self, role: str, config: AppConfig, prefill: Any = None) -> None:  # type: ignore[misc]
        self.role = Role(role)
        model_path = resolve_model(config.model.source)
        context = serve.get_replica_context()
        application = context.app_name
        self.replica = context.replica_id.unique_id
        self.chunks = ChunkSender(_node_id())
        self.server = EngineServer.start(self.role, config, model_path, application)
        # A stopping prefill replica waits this long at most for its KV to be pulled: the
        # lease, within Serve's grace period (20 s unless configured), less a margin.
        grace = config.prefill.graceful_shutdown_timeout_s
        self.drain_limit_s = max(0.0, min(config.transport.kv_lease_s, (grace or 20.0) - 2))
        self.warmup = WarmupReport()
        self.warmup.engine_s = await warm_engine(self.server, self.role, config.model.max_model_len)
        transports = engine_transports(config.transport.kind, nixl_installed())
        grpc = config.request_path.grpc
        if prefill is not None:
            peers = replica_ids(application, POOL_NAMES[Role.PREFILL])
            pool = ServePoolClient(prefill, grpc)
            # Each prefill replica's link into this one, measured from warm-up on.
            self.server.links = LinkMeter(ray_link_export(self.replica, application))
            keep_gauges_alive(weakref.ref(self.server.links))
            await warm_pair(self.server, pool, transports, self.warmup, peers)
            # Fencing: KV held by a prefill replica that is gone is refused at once.
            self.server.peer_alive = ReplicaLiveness(application, POOL_NAMES[Role.PREFILL])
        elif self.role is Role.PREFILL and running_replicas(application, POOL_NAMES[Role.DECODE]):
            # Joining a running app: each decode replica meets this engine now, not on
            # a user's request. (At the app's start decode is not running yet, and pairs
            # with this replica itself.)
            decode = serve.get_deployment_handle(POOL_NAMES[Role.DECODE], application)
            peers = replica_ids(application, POOL_NAMES[Role.DECODE])
            pool = ServePoolClient(decode, grpc)
            await warm_pair_from_prefill(self.server, pool, transports, self.warmup, peers)
        # An engine that died warming up must not be counted ready.
        await self.server.engine.check_health()
        # What the SLO autoscaling policy reads, counted from here (warm-up left out).
        pool_config = config.pool_for(self.role)
        scaling = pool_config.autoscaling_config
        window_s = max(2.0, scaling.look_back_period_s) if scaling else 10.0
        self.window = WindowStats(window_s, config.slo.percentile)
        self.window.add(self._snapshot())
        _record_warmup(self.role, self.warmup, application)
        logger.info(
            "%s engine %s ready, warm in %.1f s (engine %.1f s, pair %.1f s with %d replicas: %s)",
            self.role.value,
            self.server.engine_id,
            self.warmup.total_s,
            self.warmup.engine_s,
            self.warmup.pair_s,
            self.warmup.peers,
            self.warmup.transports or "none",
        )

    def ready(self) -> str:
        """This replica's engine id: a replica that answers is warm (its constructor warmed
        it up before Serve routed to it). The ingress's readiness probe calls it."""
        return self.server.engine_id

    def warmup_report(self) -> dict[str, Any]:
        """What this replica's warm-up did (seconds per stage, pair result per transport)."""
        return {
            "engine_s": self.warmup.engine_s,
            "pair_s": self.warmup.pair_s,
            "peers": self.warmup.peers,
            "transports": dict(self.warmup.transports),
        }

    def links(self) -> list[dict[str, Any]]:
        """The KV links into this decode replica as measured (app.kv.link_meter):
        per prefill replica and transport, bandwidth (bytes/s), transfers, slow or not."""
        meter = self.server.links
        if meter is None:
            return []
        return [
            {"prefill": prefill, "transport": transport.value, **vars(link)}
            for (prefill, transport), link in list(meter.links.items())
        ]

    async def prefill(
        self, request: GenerateRequest, transport: Transport = Transport.NIXL
    ) -> AsyncIterator[Started | PrefillResult]:
        async for item in self.server.prefill(request, transport):
            # Named so that a release of the KV finds this replica (request_routers).
            yield replace(item, replica=self.replica) if isinstance(item, PrefillResult) else item

    async def release_kv(self, release: KvRelease) -> str:
        """Free the NIXL blocks a prefill kept, at once (app.kv.lease_release)."""
        if release.replica != self.replica:
            return Release.UNKNOWN.value  # routed here because its replica is gone
        return (await self.server.release_kv(release.kv_transfer_params)).value

    async def generate(
        self, request: GenerateRequest
    ) -> AsyncIterator[Started | TokenChunk | DirectEnd]:
        """The request's stream; its token chunks pushed to the ingress when it is on this
        host (app.pool.chunk_sender), then how many, else yielded here."""
        target = request.stream_to
        chunks = self.server.generate(request)
        del request  # the engine server lets go of an object-store KV once it has it
        if target is None or not self.chunks.reaches(target):
            async for chunk in chunks:
                yield chunk
            return
        pushed = 0
        try:
            async for chunk in chunks:
                if isinstance(chunk, Started):
                    yield chunk  # in order with errors, through Serve
                else:
                    self.chunks.send(target, chunk)
                    pushed += 1
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]  # a failed send aborts
        yield DirectEnd(pushed)

    def stats(self) -> EngineStats:
        return self.server.stats()

    async def kv_blocks(self, query: BlocksQuery) -> BlockChanges | None:
        """What this engine's prefix cache gained and lost since the ingress last asked
        (deployments.prefix_index_reader); None when it was asked of another replica."""
        if query.replica != self.replica:
            return None  # routed here because the replica asked for is gone
        return await self.server.kv_blocks(query.epoch, query.since, query.wait_s)

    def record_routing_stats(self) -> dict[str, Any]:
        """What the KV-capacity router ranks decode replicas by (Serve polls it)."""
        tally = self.server.tally
        return {
            "kv_cache_usage": tally.kv_usage,
            "running": float(tally.running),
            "waiting": float(tally.waiting + tally.deferred),
            # Prefixes are cached in whole blocks of this size (the decode router rounds
            # what a replica holds down to them).
            "cache_block_tokens": float(self.server.cache_block_tokens),
        }

    def record_autoscaling_stats(self) -> dict[str, float]:
        """This engine's figures over the last window (app.scaling.autoscaling_stats); Serve polls
        it for the SLO autoscaling policy (deployments.slo_autoscaler)."""
        return self.window.add(self._snapshot())

    def _snapshot(self) -> Snapshot:
        server = self.server
        return server.tally.snapshot(
            server.busy.seconds, time.monotonic(), server.arrived_prompt_tokens
        )

    async def all_blocks_free(self) -> bool:
        return await self.server.all_blocks_free()

    async def hold_scheduling(self, seconds: float) -> None:
        """Fault injection: the engine schedules nothing for ``seconds`` (app.engine.control)."""
        await self.server.hold_scheduling(seconds)

    def process_info(self) -> dict[str, Any]:
        """PIDs, RSS and the address of the Ray node this replica runs on."""
        import ray.util

        node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return {**self.server.process_info(), "node_ip": node_ip}

    async def check_health(self) -> None:
        await self.server.engine.check_health()

    async def __del__(self) -> None:
        """Serve's last call to a stopping replica (a redeploy, a scale-down), within its
        ``graceful_shutdown_timeout_s``. A prefill replica first waits until every KV it
        holds for a decode is pulled or its lease expires, so its exit fails no transfer
        (drain until pulled); Serve has already stopped routing prefills to it."""
        server = getattr(self, "server", None)
        if server is None or getattr(self, "_stopped", False):
            return
        self._stopped = True
        if self.role is Role.PREFILL:
            started = time.monotonic()
            held, left = await server.drain_leases(self.drain_limit_s)
            if held:
                logger.info(
                    "prefill engine %s drained: %d KV leases held at stop, %d left after %.1f s",
                    server.engine_id,
                    held,
                    left,
                    time.monotonic() - started,
                )
        server.shutdown()
        self.chunks.close()


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def _record_warmup(role: Role, report: WarmupReport, application: str) -> None:
    """The warm-up's seconds in Ray's metrics (``ray_splitserve_replica_warmup_seconds``).

    A histogram, not a gauge: Ray drops a gauge nobody sets again within two export
    intervals, and a warm-up happens once per replica.
    """
    from ray.util import metrics

    histogram = metrics.Histogram(
        "splitserve_replica_warmup_seconds",
        description="Seconds an engine replica spent warming up before it was ready, by "
        "stage (engine: its own prefill and decode shapes; pair: transfers from prefill).",
        boundaries=[1, 2, 5, 10, 20, 30, 60, 120, 300, 600],
        tag_keys=("role", "stage", "application"),
    )
    histogram.set_default_tags({"role": role.value, "application": application})
    histogram.observe(report.engine_s, tags={"stage": "engine"})
    histogram.observe(report.pair_s, tags={"stage": "pair"})
