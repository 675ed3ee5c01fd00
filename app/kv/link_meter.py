"""Each prefill-to-decode link's measured speed, per transport, from the KV it moved.

A decode replica observes every transfer it receives (warm-up's included: a pair's
warm-up moves one request per transport, and a large one to measure): bytes, and the
seconds the transport took (NIXL: the decode engine's read, as its connector timed it;
object store: getting the payload next to the engine). Per prefill replica and transport
it keeps an exponentially weighted mean of the bandwidth of transfers of at least
``MIN_BYTES`` (smaller ones measure latency, not bandwidth) and exports it to Ray's
metrics as ``ray_splitserve_kv_link_bytes_per_second{prefill,decode,transport}``.

A pair whose NIXL link runs below ``SLOW_SHARE`` of what the object store moved between
the same two replicas is slow: NIXL moves blocks in place (RDMA, shared memory, or one
UCX copy), the object store serializes and copies them twice, so a NIXL link that loses
to it has usually lost its fast path (UCX fell back to TCP, a NIC is misconfigured). It
is logged once as a warning and exported as ``ray_splitserve_kv_link_slow`` = 1.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.kv.fallback import Transport

logger = logging.getLogger("splitserve.links")

MIN_BYTES = 1 << 20  # a transfer this large or larger measures bandwidth
WEIGHT = 0.3  # of the newest transfer in the mean
SLOW_SHARE = 0.5


@dataclass
class Link:
    """One prefill replica to this decode replica over one transport."""

    bytes_per_s: float = 0.0  # weighted mean; 0 until a large enough transfer
    transfers: int = 0
    slow: bool = False


class LinkMeter:
    """The links into one decode replica. ``export(prefill, transport, link)`` publishes
    a link's figures (:func:`ray_link_export` in a replica; tests pass their own)."""

    def __init__(self, export: Callable[[str, Transport, Link], None] | None = None) -> None:
        self.links: dict[tuple[str, Transport], Link] = {}
        self._export = export
        self._lock = threading.Lock()

    def observe(self, prefill: str, transport: Transport, kv_bytes: int, seconds: float) -> None:
        """One transfer's KV received from ``prefill`` (its replica id) by ``transport``."""
        if kv_bytes < MIN_BYTES or seconds <= 0 or transport is Transport.RECOMPUTE:
            return
        rate = kv_bytes / seconds
        with self._lock:
            link = self.links.setdefault((prefill, transport), Link())
            link.transfers += 1
            link.bytes_per_s = (
                rate if link.transfers == 1 else WEIGHT * rate + (1 - WEIGHT) * link.bytes_per_s
            )
            self._judge(prefill)
            changed = [(key, value) for key, value in self.links.items() if key[0] == prefill]
        for (source, kind), value in changed:
            self.publish(source, kind, value)

    def _judge(self, prefill: str) -> None:
        nixl = self.links.get((prefill, Transport.NIXL))
        store = self.links.get((prefill, Transport.OBJECT_STORE))
        if nixl is None or store is None:
            return
        slow = nixl.bytes_per_s < SLOW_SHARE * store.bytes_per_s
        if slow and not nixl.slow:
            logger.warning(
                "NIXL from prefill replica %s moves KV at %.2f GB/s, below %.0f%% of the "
                "object store's %.2f GB/s on the same pair: NIXL has likely lost its fast "
                "path (check UCX_TLS and that UCX found shared memory or RDMA, not TCP)",
                prefill,
                nixl.bytes_per_s / 1e9,
                SLOW_SHARE * 100,
                store.bytes_per_s / 1e9,
            )
        nixl.slow = slow

    def publish(self, prefill: str, transport: Transport, link: Link) -> None:
        if self._export is not None:
            self._export(prefill, transport, link)

    def forget(self, prefill: str) -> None:
        """Stop exporting the links from a prefill replica that is gone."""
        with self._lock:
            for key in [key for key in self.links if key[0] == prefill]:
                del self.links[key]

    def refresh_gauges(self) -> None:
        """Set every link's gauges again (Ray drops a gauge not set for two intervals)."""
        with self._lock:
            links = list(self.links.items())
        for (prefill, transport), link in links:
            self.publish(prefill, transport, link)


def ray_link_export(decode: str, application: str) -> Callable[[str, Transport, Link], None]:
    """Publishes a link to Ray's metrics, as seen by decode replica ``decode``."""
    from ray.util import metrics

    keys = ("prefill", "decode", "transport", "application")
    rate = metrics.Gauge(
        "splitserve_kv_link_bytes_per_second",
        description="KV bandwidth from a prefill replica to a decode replica, by transport: "
        "a weighted mean over the transfers of at least 1 MiB it received.",
        tag_keys=keys,
    )
    slow = metrics.Gauge(
        "splitserve_kv_link_slow",
        description="1 when the pair's NIXL link moves KV at under half the object "
        "store's rate between the same replicas (NIXL lost its fast path), else 0.",
        tag_keys=keys,
    )

    def export(prefill: str, transport: Transport, link: Link) -> None:
        tags: dict[str, Any] = {
            "prefill": prefill,
            "decode": decode,
            "transport": transport.value,
            "application": application,
        }
        if link.bytes_per_s:
            rate.set(link.bytes_per_s, tags=tags)
        if transport is Transport.NIXL:
            slow.set(1.0 if link.slow else 0.0, tags=tags)

    return export
