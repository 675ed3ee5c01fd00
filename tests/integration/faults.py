"""Helpers for fault tests: find, kill and wait for Serve replicas; check KV blocks."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
from ray import serve

APP = "splitserve"


def handle(deployment: str) -> Any:
    return serve.get_deployment_handle(deployment, app_name=APP)


def prefill_once(request: Any, transport: Any = None) -> Any:
    """Prefill ``request`` on the Prefill pool (NIXL by default); its PrefillResult."""
    from app.kv_transport.fallback import Transport
    from app.records import PrefillResult

    stream = (
        handle("Prefill").options(stream=True).prefill.remote(request, transport or Transport.NIXL)
    )
    results = [item for item in stream if isinstance(item, PrefillResult)]
    assert len(results) == 1, results
    return results[0]


def decode_chunks(request: Any) -> list[Any]:
    """Every TokenChunk the Decode pool streams for ``request`` (the Started marker left out)."""
    from app.records import TokenChunk

    stream = handle("Decode").options(stream=True).generate.remote(request)
    return [item for item in stream if isinstance(item, TokenChunk)]


def call(deployment: str, method: str) -> Any:
    """Call a replica method and wait for it, also from inside a running event loop
    (where Serve refuses a blocking ``.result()``)."""

    def blocking() -> Any:
        return getattr(handle(deployment), method).remote().result()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return blocking()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(blocking).result()


def wait_until(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def all_blocks_free(deployment: str) -> bool:
    return bool(call(deployment, "all_blocks_free"))


def assert_no_kv_held(*deployments: str, timeout_s: float = 30.0) -> None:
    for name in deployments:
        wait_until(lambda n=name: all_blocks_free(n), timeout_s, f"{name} to free every KV block")


def kill_replica(deployment: str) -> list[int]:
    """SIGKILL the (single) replica process of ``deployment``; return its engine's PIDs."""
    info = call(deployment, "process_info")
    os.kill(int(info["pid"]), signal.SIGKILL)
    return [int(pid) for pid in info["children"]]


def wait_healthy(deployment: str, timeout_s: float = 240.0) -> None:
    def healthy() -> bool:
        status = serve.status().applications[APP]
        return bool(
            status.status == "RUNNING" and status.deployments[deployment].status == "HEALTHY"
        )

    wait_until(healthy, timeout_s, f"{deployment} to be healthy again", interval_s=2)


def wait_processes_gone(pids: list[int], timeout_s: float = 60.0) -> None:
    def gone() -> bool:
        return not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids
        )

    wait_until(gone, timeout_s, f"engine processes {pids} to exit with their replica")
