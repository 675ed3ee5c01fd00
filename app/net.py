"""Free TCP ports on a host (the NIXL side channel, test and benchmark harnesses), whether
an address is loopback, and this host's address and interface in a given network."""

from __future__ import annotations

import ipaddress
import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LISTEN_PORTS_FROM = 10000  # below: well-known and commonly configured service ports


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this host only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def is_network(host: str) -> bool:
    """Whether ``host`` names a network (``10.1.0.0/16``) rather than one address."""
    return "/" in host


def address_in(network: str) -> tuple[str, str]:
    """This host's address in ``network`` (``10.1.0.0/16``) and the interface holding it;
    ``ValueError`` naming the network and this host's addresses when it has none there."""
    import psutil

    wanted = ipaddress.ip_network(network, strict=False)
    seen: list[str] = []
    for interface, addresses in sorted(psutil.net_if_addrs().items()):
        for entry in addresses:
            if entry.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = entry.address.split("%")[0]  # an IPv6 link-local's scope
            seen.append(f"{address} ({interface})")
            if ipaddress.ip_address(address) in wanted:
                return address, interface
    raise ValueError(
        f"this host has no address in {network}; its addresses: {', '.join(seen) or 'none'}"
    )


def interface_of(address: str) -> str | None:
    """The interface holding ``address`` on this host, or None."""
    import psutil

    for interface, addresses in psutil.net_if_addrs().items():
        if any(entry.address.split("%")[0] == address for entry in addresses):
            return str(interface)
    return None


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections and to ``bind(port 0)``."""
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_listen_port(host: str, rng: random.Random | None = None) -> int:
    """A free port on ``host`` for a server that binds it *later* (another process).

    Chosen outside the kernel's ephemeral range: a port from :func:`free_port` can be
    handed to any outgoing connection between the check and the bind (seen under load:
    a new decode replica's NIXL side channel failed to bind and its engine never became
    ready). Only an explicit bind can take a port outside that range; picking at random
    makes two replicas starting at once unlikely to pick the same one.
    """
    rng = rng or random.SystemRandom()
    low, high = ephemeral_range()
    candidates = [(LISTEN_PORTS_FROM, low)] if low > LISTEN_PORTS_FROM else []
    if high < 65000:
        candidates.append((high + 1, 65536))
    if not candidates:
        return free_port(host)
    for _ in range(200):
        start, end = rng.choice(candidates)
        port = rng.randrange(start, end)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port outside the ephemeral range on {host}")


def free_port_range(host: str, count: int) -> int:
    """The first of ``count`` consecutive TCP ports that are all free on ``host`` now
    (starting outside the ephemeral range, as :func:`free_listen_port`)."""
    for _ in range(100):
        first = free_listen_port(host)
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
