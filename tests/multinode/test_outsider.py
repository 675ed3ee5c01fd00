"""An outsider on the hosts' network (host c, no token, no key) reaches the ports but is
refused by each: the API without the key (401), Ray's GCS without the cluster's token
(gRPC UNAUTHENTICATED), while the same calls with the key and the token are answered.

The engines' NIXL side channels and UCX listen on the cluster's own network
(``side_channel_host: 198.19.0.0/24``), which host c is not on: it cannot reach them at
all, while host b, on that network, is answered.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from load_tests.systems.testnet_cluster import API_KEY, TESTNET, cluster_address, host_address
from tests.integration.faults import call

ROOT = Path(__file__).resolve().parents[2]

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


CONNECT = """
import errno, json, socket, sys
found = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    sock = socket.socket()
    sock.settimeout(5)
    try:
        sock.connect((host, int(port)))
        found[target] = "connected"
    except OSError as error:
        found[target] = errno.errorcode.get(error.errno, "timeout") if error.errno else "timeout"
    finally:
        sock.close()
print(json.dumps(found))
"""

ASK_METADATA = """
import sys, zmq
from tests.harness.side_channel_client import ask, metadata_request
answer = ask(zmq.Context(), "tcp://" + sys.argv[1], metadata_request(), timeout_ms=10000)
print(len(answer[1]) if answer else 0)
"""


def _run_on(host: str, script: str, *args: str) -> str:
    done = subprocess.run(
        [TESTNET, "exec", host, sys.executable, "-c", script, *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def _listeners(host: str) -> list[tuple[str, str]]:
    """(address, port) of every TCP socket listening on ``host``."""
    shown = subprocess.run(
        [TESTNET, "exec", host, "ss", "-ltnH"], check=True, capture_output=True, text=True
    ).stdout
    found = []
    for line in shown.splitlines():
        local = line.split()[3]
        address, port = local.rsplit(":", 1)
        found.append((address.strip("[]"), port))
    return found


def test_an_outsider_cannot_reach_the_side_channels_a_peer_can(multinode):
    if not _outsider_host():
        pytest.skip("host c is not up (make test-multinode brings up three hosts)")
    channels = {
        "a": call("Prefill", "process_info")["side_channel"],
        "b": call("Decode", "process_info")["side_channel"],
    }
    for host, channel in channels.items():
        assert channel.rsplit(":", 1)[0] == cluster_address(host), channels
    # Everything listening on the cluster's addresses (the side channels, UCX's listeners)
    # and the same ports on the hosts' shared addresses.
    on_cluster = {
        host: [port for address, port in _listeners(host) if address == cluster_address(host)]
        for host in channels
    }
    for host, channel in channels.items():
        assert channel.rsplit(":", 1)[1] in on_cluster[host], (channel, on_cluster)
    targets = [
        f"{address}:{port}"
        for host, ports in on_cluster.items()
        for port in ports
        for address in (cluster_address(host), host_address(host))
    ]
    found = json.loads(_run_on("c", CONNECT, *targets))
    reached = {target: how for target, how in found.items() if how == "connected"}
    assert not reached, f"the outsider reached {reached} (all tried: {found})"
    for host, ports in on_cluster.items():
        for port in ports:
            assert found[f"{cluster_address(host)}:{port}"] == "ENETUNREACH", found
    # The control: host b, on the cluster's network, gets prefill's handshake metadata.
    assert int(_run_on("b", ASK_METADATA, channels["a"])) > 0
