"""The Ray Serve settings the cluster must start with, and the harness that applies them."""

import os
import re
from pathlib import Path

from deployments.cluster_env import SERVE_CLUSTER_ENV, missing_cluster_env, serve_cluster_env

MAKEFILE = Path(__file__).parents[2] / "Makefile"


def test_make_run_exports_the_same_settings():
    line = re.search(r"^SERVE_CLUSTER_ENV := (.*)$", MAKEFILE.read_text(), re.MULTILINE)
    assert line, "Makefile lost SERVE_CLUSTER_ENV"
    assert dict(item.split("=", 1) for item in line.group(1).split()) == SERVE_CLUSTER_ENV


def test_harness_sets_what_is_missing_keeps_what_is_set_and_restores(monkeypatch):
    for key in SERVE_CLUSTER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_SERVE_PROXY_USE_GRPC", "0")  # the user turned it off
    assert missing_cluster_env() == ["RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0"]
    with serve_cluster_env():
        assert os.environ["RAY_SERVE_PROXY_USE_GRPC"] == "0"
        assert os.environ["RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP"] == "0"
        assert missing_cluster_env() == []
    assert "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP" not in os.environ
    assert os.environ["RAY_SERVE_PROXY_USE_GRPC"] == "0"
