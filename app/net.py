"""Free TCP ports on a host (the NIXL side channel, test and benchmark harnesses)."""

from __future__ import annotations

import socket


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port_range(host: str, count: int) -> int:
    """The first of ``count`` consecutive TCP ports that are all free on ``host`` now."""
    for _ in range(100):
        first = free_port(host)
        if first + count > 65536:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no {count} consecutive free ports on {host}")
