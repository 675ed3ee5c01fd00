"""Ports picked for servers that bind them later stay out of the kernel's ephemeral range."""

import random
import socket

from app import net


def test_a_listen_port_is_free_and_outside_the_ephemeral_range():
    low, high = net.ephemeral_range()
    rng = random.Random(7)
    for _ in range(50):
        port = net.free_listen_port("127.0.0.1", rng)
        assert not low <= port <= high
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free indeed


def test_a_port_in_use_is_not_picked(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        used = taken.getsockname()[1]
        taken.listen()
        # Only two ports to pick from, the first of them in use.
        monkeypatch.setattr(net, "ephemeral_range", lambda: (used + 2, 65535))
        monkeypatch.setattr(net, "LISTEN_PORTS_FROM", used)
        picks = {net.free_listen_port("127.0.0.1", random.Random(i)) for i in range(20)}
    assert picks == {used + 1}


def test_a_range_of_ports_is_free():
    first = net.free_port_range("127.0.0.1", 16)
    for port in range(first, first + 16):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
