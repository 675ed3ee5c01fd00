"""What a replica reports of its own processes: PIDs, memory, its NIXL side channel."""

from __future__ import annotations

import os
from typing import Any

from app.pool.records import Role


def process_info(role: Role) -> dict[str, Any]:
    """PID and resident memory (bytes) of this process and the engine processes it
    spawned, and where its NIXL side channel listens (``host:port``; None colocated)."""
    import psutil

    me = psutil.Process()
    rss = me.memory_info().rss
    children = []
    for child in me.children(recursive=True):
        try:
            rss += child.memory_info().rss
            children.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    side_channel = None
    if role is not Role.COLOCATED:
        side_channel = (
            f"{os.environ['VLLM_NIXL_SIDE_CHANNEL_HOST']}:"
            f"{os.environ['VLLM_NIXL_SIDE_CHANNEL_PORT']}"
        )
    return {"pid": me.pid, "rss_bytes": rss, "children": children, "side_channel": side_channel}
