"""How KV moves from the prefill pool to the decode pool: `transport:`."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator

from app.config.base import Strict


class TransportConfig(Strict):
    """How KV moves from the prefill pool to the decode pool."""

    kind: Literal["auto", "nixl", "object_store"] = Field(
        "auto",
        description="`nixl` (UCX/RDMA), `object_store` (Ray object store), or `auto`: NIXL "
        "first, the object store when NIXL is missing or fails, local recompute last. "
        "Every kind ends in recompute, so a failed transfer never fails a request.",
    )
    kv_buffer_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where NIXL registers the KV buffers: `cpu` (host memory), `cuda`, or "
        "`auto` (cuda when the engine runs on a GPU, else cpu).",
    )
    side_channel_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Address each engine's NIXL handshake listener binds and advertises. "
        "`127.0.0.1` keeps a single machine's traffic on loopback. A network, e.g. "
        "`10.1.0.0/16`: each host's own address in it (the cluster's private network, "
        "which hosts outside it cannot reach; UCX then uses only that interface unless "
        "`ucx_net_devices` says otherwise). `auto`: the address of the Ray node the "
        "replica runs on (reachable by anyone on that network).",
    )
    ucx_tls: str | None = Field(
        None,
        pattern=r"^\^?[a-z0-9_,]+$",
        description="UCX transports NIXL may use (UCX_TLS), e.g. `tcp` to force the network "
        "path between hosts, `rc,ud,sm,self` on RDMA fabrics; None lets UCX choose.",
    )
    ucx_net_devices: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.:\-]+(,[A-Za-z0-9_.:\-]+)*$",
        description="Network devices UCX may listen on and use (UCX_NET_DEVICES), e.g. "
        "`eth1` for the cluster's own network or `mlx5_0:1` for an RDMA port. None: `lo` "
        "when `side_channel_host` is a loopback address (one host: UCX listens on no "
        "other interface), else every device (UCX's default). `all`: every device.",
    )
    prefill_queue_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest wait for a prefill replica to start a request's prefill "
        "(Serve's queue: every replica busy, or none alive); then decode prefills it.",
    )
    prefill_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a prefill may run once its replica started it; then the "
        "next transport is tried.",
    )
    transfer_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest wait for decode's first token when it must pull KV, counted "
        "from when the decode replica started the request: the object-store fetch, the "
        "wait in the decode engine's own queue, the read and one step; then the next "
        "transport is tried. Time in Serve's queue for the decode pool does not count, "
        "and recompute has no such limit.",
    )
    kv_lease_s: int = Field(
        30,
        ge=6,
        description="Lease on the KV blocks prefill holds for decode: freed when decode "
        "confirms the pull, or when the lease runs out (decode renews it while it waits). "
        "A read that would start more than kv_lease_s - (kv_lease_s // 6 + 2) s after the "
        "prefill is refused (kv_expired) and the next transport serves.",
    )
    nixl_progress_thread: bool = Field(
        True,
        description="Run NIXL's progress thread, which drives UCX in the background. "
        "Transports whose target side must act need it (a READ over TCP is served by the "
        "prefill engine's UCX worker): without it such a READ completes only while the "
        "prefill engine steps, and can stall for good once it idles.",
    )
    nixl_progress_poll_ms: int = Field(
        50,
        ge=0,
        le=1000,
        description="Longest pause of NIXL's progress thread between polls; it wakes at "
        "once when UCX has network events, so a longer pause costs a transfer nothing "
        "(a 4 MiB READ over TCP from an idle side: 20 ms at 5, 18 ms at 50) and an idle "
        "engine less CPU. 0 keeps NIXL's own setting, polling without pause, which keeps "
        "one core busy per engine even when idle.",
    )

    @field_validator("side_channel_host")
    @classmethod
    def _network_parses(cls, value: str) -> str:
        if "/" in value:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(
                    f"{value!r} is not a network (an address and a prefix length, e.g. 10.1.0.0/16)"
                ) from None
        return value
