"""An outsider on the hosts' network (host c, no token, no key) reaches the ports but is
refused by each: the API without the key (401), Ray's GCS without the cluster's token
(gRPC UNAUTHENTICATED), while the same calls with the key and the token are answered.

The side channels are not in this test: with `side_channel_host: auto` they listen on the
hosts' shared network and answer anyone (docs/network_exposure.md); isolating them takes a
network of the cluster's own, which the test hosts do not have.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.testnet_cluster import API_KEY, TESTNET

OUTSIDER = """
import json, sys
import grpc, httpx
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

url, gcs, key, token = sys.argv[1:5]
found = {}
body = {"prompt": [5, 6, 7], "max_tokens": 2}
for name, headers in (("no key", {}), ("wrong key", {"authorization": "Bearer " + "x" * 24}),
                      ("key", {"authorization": "Bearer " + key})):
    found["api, " + name] = httpx.post(url + "/v1/completions", json=body, headers=headers,
                                       timeout=30).status_code
stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(grpc.insecure_channel(gcs))
for name, metadata in (("no token", ()), ("token", (("authorization", "Bearer " + token),))):
    try:
        stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=15,
                            metadata=metadata)
        found["gcs, " + name] = "OK"
    except grpc.RpcError as error:
        found["gcs, " + name] = error.code().name
print(json.dumps(found))
"""


def _outsider_host() -> bool:
    return subprocess.run([TESTNET, "ip", "c"], capture_output=True).returncode == 0 and (
        subprocess.run([TESTNET, "exec", "c", "true"], capture_output=True).returncode == 0
    )


def test_an_outsider_is_refused_by_the_api_and_by_ray(multinode):
    import ray

    if not _outsider_host():
        pytest.skip("host c is not up (make test-multinode brings up three hosts)")
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    gcs = ray.get_runtime_context().gcs_address
    command = [TESTNET, "exec", "c", sys.executable, "-c", OUTSIDER]
    done = subprocess.run(
        [*command, multinode.disaggregated, gcs, API_KEY, token],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "api, no key": 401,
        "api, wrong key": 401,
        "api, key": 200,
        "gcs, no token": "UNAUTHENTICATED",
        "gcs, token": "OK",
    }, found
