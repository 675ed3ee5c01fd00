"""The Ray Serve settings the cluster must start with, and the harness that applies them."""

import os
import re
from pathlib import Path

from app.net import free_port_range
from deployments.cluster_env import (
    DIRECT_PORT_COUNT,
    PATH_ENV,
    SERVE_CLUSTER_ENV,
    harness_ports,
    missing_cluster_env,
    serve_cluster_env,
)

MAKEFILE = Path(__file__).parents[2] / "Makefile"


def test_make_run_exports_the_same_settings():
    makefile = MAKEFILE.read_text().replace("\\\n", " ")  # join continued lines
    line = re.search(r"^SERVE_CLUSTER_ENV := (.*)$", makefile, re.MULTILINE)
    assert line, "Makefile lost SERVE_CLUSTER_ENV"
    assert dict(item.split("=", 1) for item in line.group(1).split()) == SERVE_CLUSTER_ENV


def test_harness_sets_what_is_missing_keeps_what_is_set_and_restores(monkeypatch):
    for key in SERVE_CLUSTER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_SERVE_PROXY_USE_GRPC", "0")  # the user turned it off
    missing = [key for key in PATH_ENV if key != "RAY_SERVE_PROXY_USE_GRPC"]
    assert missing_cluster_env() == [f"{key}={PATH_ENV[key]}" for key in missing]
    with serve_cluster_env() as direct_port:
        assert direct_port == 8100
        assert os.environ["RAY_SERVE_PROXY_USE_GRPC"] == "0"
        assert os.environ["RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP"] == "0"
        assert missing_cluster_env() == []
        assert os.environ["RAY_SERVE_CONTROL_LOOP_INTERVAL_S"] == "0.5"
    assert "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP" not in os.environ
    assert os.environ["RAY_SERVE_PROXY_USE_GRPC"] == "0"


def test_harness_moves_the_direct_ingress_ports_or_leaves_them_off(monkeypatch):
    for key in SERVE_CLUSTER_ENV:
        monkeypatch.delenv(key, raising=False)
    with serve_cluster_env(direct_ports=41000) as direct_port:
        assert direct_port == 41000
        assert os.environ["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"] == "41000"
        assert os.environ["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"] == "41016"
    monkeypatch.setenv("RAY_SERVE_ENABLE_DIRECT_INGRESS", "0")
    with serve_cluster_env(direct_ports=41000) as direct_port:
        assert direct_port is None


def test_a_free_port_range_is_free():
    import socket

    first = free_port_range("127.0.0.1", 4)
    for port in range(first, first + 4):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_harness_ports_keep_the_proxy_out_of_the_direct_range():
    direct, proxy = harness_ports("127.0.0.1")
    assert not direct <= proxy < direct + DIRECT_PORT_COUNT
