"""Prefill and decode on different Ray nodes: the project's test hosts (scripts/testnet).

`make test-multinode` brings the hosts up, runs this session inside host a's network
namespace and tears everything down afterwards. Host a (198.18.0.1) runs the Ray head,
the proxy, the ingress, the prefill pool and the colocated reference; host b
(198.18.0.2) runs the decode pool. The NIXL side channels and UCX use the hosts' own
network (198.19.0.0/24, which the third host, the outsider, is not on). UCX is limited
to TCP so the KV really crosses the veth link (on one machine UCX would otherwise pick
shared memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from load_tests.systems.local_app import config_args, merge
from load_tests.systems.testnet_cluster import (
    API_KEY,
    TestnetCluster,
    inside_testnet,
    two_host_args,
)

CONFIGS = Path(__file__).parents[2] / "serve_configs"


@dataclass
class MultiNode:
    cluster: TestnetCluster
    disaggregated: str
    colocated: str

    def redeploy(self, kind: str) -> None:
        """Replace the disaggregated app with one using transport ``kind``."""
        self.cluster.deploy(two_host_args(kind), "splitserve", "/")


@pytest.fixture(scope="session")
def multinode() -> Any:
    if not inside_testnet():
        pytest.skip("not inside the test network: run `make test-multinode`")
    # Its ingress on host a too: the ingress serves HTTP on the head's address, which a
    # replica placed on host b cannot bind (every port of its range failed there once).
    colocated = merge(
        config_args(CONFIGS / "colocated.yaml"),
        {
            "decode": {"ray_actor_options": {"num_cpus": 1, "resources": {"host_a": 1}}},
            "ingress": {"ray_actor_options": {"resources": {"host_a": 0.01}}},
        },
    )
    with TestnetCluster(("a", "b")) as cluster:
        yield MultiNode(
            cluster,
            cluster.deploy(two_host_args("nixl"), "splitserve", "/"),
            cluster.deploy(colocated, "colocated", "/colocated"),
        )


@pytest.fixture(scope="session")
def http(multinode: MultiNode) -> Any:
    import httpx

    with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        yield client
