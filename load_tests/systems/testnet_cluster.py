"""A Ray cluster over the project's test hosts (scripts/testnet): head on host a, workers
on the other hosts, each node with a custom resource naming its host (``host_a``, ...).

Run the driver inside host a's namespace (``scripts/testnet exec a ...``) after
``scripts/testnet up``. The head is this process's own ``ray.init``; each other host
runs ``ray start --block`` in its namespace. On exit every process this started is
stopped by PID (the worker nodes' whole namespaces' process lists), never ``ray stop``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.net import free_port
from deployments.cluster_env import serve_cluster_env
from load_tests.systems.local_app import config_args, merge

ROOT = Path(__file__).resolve().parents[2]
TESTNET = str(ROOT / "scripts" / "testnet")
NAMESPACE_PREFIX = "splitserve-"
# The API is served on the head's address, which other hosts reach: the ingress refuses
# to start there without a key (ingress.check_exposure), so every app deployed here has one.
API_KEY = "splitserve-testnet-api-key"


# The hosts' own network (scripts/testnet): a and b are on it, the outsider c is not.
CLUSTER_NETWORK = "198.19.0.0/24"

# Prefill (and the ingress) on host a, decode on host b; the side channels and UCX on the
# cluster's network; UCX limited to TCP so the KV really crosses the link (on one machine
# UCX would otherwise pick shared memory).
TWO_HOSTS: dict[str, Any] = {
    "transport": {
        "side_channel_host": CLUSTER_NETWORK,
        "ucx_tls": "tcp",
        "kv_lease_s": 8,
        "transfer_timeout_s": 8,
        "prefill_timeout_s": 8,
    },
    "ingress": {"request_timeout_s": 45, "ray_actor_options": {"resources": {"host_a": 0.01}}},
    # Every prompt is prefilled on host a, however short.
    "router": {"local_prefill_below_tokens": 0},
    "prefill": {"ray_actor_options": {"num_cpus": 1, "resources": {"host_a": 1}}},
    "decode": {"ray_actor_options": {"num_cpus": 1, "resources": {"host_b": 1}}},
}


def two_host_args(kind: str) -> dict[str, Any]:
    """The default config with prefill on host a, decode on host b, KV by ``kind``."""
    args = merge(config_args(ROOT / "serve_configs" / "default.yaml"), TWO_HOSTS)
    args["transport"]["kind"] = kind
    return args


def host_address(host: str) -> str:
    return subprocess.run(
        [TESTNET, "ip", host], check=True, capture_output=True, text=True
    ).stdout.strip()


def cluster_address(host: str) -> str:
    """``host``'s address on the cluster network (hosts a and b)."""
    return subprocess.run(
        [TESTNET, "cluster-ip", host], check=True, capture_output=True, text=True
    ).stdout.strip()


def set_link(host: str, state: str) -> None:
    subprocess.run([TESTNET, "link", host, state], check=True)


def shape(host: str, rate: str) -> None:
    subprocess.run([TESTNET, "shape", host, rate], check=True)


def inside_testnet() -> bool:
    """True when this process runs in host a's namespace of an up test network."""
    try:
        address = host_address("a")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False
    shown = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    return f"inet {address}/" in shown


def _namespace_pids(host: str) -> list[int]:
    listed = subprocess.run(
        ["ip", "netns", "pids", NAMESPACE_PREFIX + host], capture_output=True, text=True
    ).stdout
    return [int(pid) for pid in listed.split()]


def _alive_nodes() -> int:
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return len([n for n in nodes if n["Alive"]])


class TestnetCluster:
    """Ray head on host a + workers on ``hosts[1:]``; ``serve`` on host a's address."""

    def __init__(self, hosts: tuple[str, ...] = ("a", "b"), cpus_per_host: int = 2) -> None:
        self.hosts = hosts
        self.cpus = cpus_per_host
        self.head = host_address(hosts[0])
        self.workers: list[subprocess.Popen[bytes]] = []
        self.url = ""

    def __enter__(self) -> TestnetCluster:
        with serve_cluster_env():  # the head's processes and `ray start`'s inherit it
            return self._start()

    def _start(self) -> TestnetCluster:
        import ray
        from ray import serve

        ray.init(
            address="local",  # a new head, even if a file names an older cluster
            _node_ip_address=self.head,
            num_cpus=self.cpus,
            resources={f"host_{self.hosts[0]}": 100},
            include_dashboard=False,
            log_to_driver=False,
            namespace="splitserve-testnet",
        )
        try:
            gcs = ray.get_runtime_context().gcs_address
            ray_bin = str(Path(sys.executable).with_name("ray"))
            for host in self.hosts[1:]:
                command = [
                    TESTNET, "exec", host, ray_bin, "start", "--block", "--address", gcs,
                    "--node-ip-address", host_address(host), "--num-cpus", str(self.cpus),
                    "--resources", f'{{"host_{host}": 100}}', "--disable-usage-stats",
                ]  # fmt: skip
                self.workers.append(
                    subprocess.Popen(
                        command,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
            deadline = time.monotonic() + 60
            while _alive_nodes() < len(self.hosts):
                if time.monotonic() > deadline:
                    raise RuntimeError("worker nodes did not join the head in 60 s")
                time.sleep(0.5)
            port = free_port(self.head)
            serve.start(http_options={"host": self.head, "port": port})
            self.url = f"http://{self.head}:{port}"
        except BaseException:
            self.__exit__()
            raise
        return self

    def deploy(self, args: dict[str, Any], name: str, route_prefix: str) -> str:
        """Deploy the app of ``args``, guarded by :data:`API_KEY`; its URL once ready."""
        from ray import serve

        from deployments.builder import build_app
        from load_tests.systems.local_app import wait_ready

        args = merge(args, {"ingress": {"api_key": API_KEY}})
        serve.run(build_app(args), name=name, route_prefix=route_prefix)
        url = self.url + route_prefix.rstrip("/")
        wait_ready(url)
        return url

    def __exit__(self, *exc: object) -> None:
        import ray
        from ray import serve

        try:
            if ray.is_initialized():
                serve.shutdown()  # type: ignore[no-untyped-call]
        finally:
            for worker in self.workers:
                if worker.poll() is None:
                    os.killpg(worker.pid, signal.SIGTERM)
            for host in self.hosts[1:]:
                for pid in _namespace_pids(host):  # raylet, workers, engines on that host
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            for worker in self.workers:
                worker.wait(timeout=30)
            ray.shutdown()
            # `ray start` on a worker host records the head's address for later
            # `ray.init()` calls on this machine; that cluster is gone now.
            current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
            with contextlib.suppress(OSError):
                if current.read_text().startswith(self.head):
                    current.unlink()
