"""One Ray cluster and two Serve apps per test session (engines are slow to start).

- ``splitserve`` at ``/``: serve_configs/default.yaml (prefill core 0, decode core 1);
- ``colocated`` at ``/colocated``: serve_configs/colocated.yaml with 2 replicas behind the
  prefix-affinity router, the reference outputs.

Everything binds 127.0.0.1; `make test` also runs the suite in a loopback-only network
namespace. The cluster is stopped with ``ray.shutdown()``, never ``ray stop``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.net import free_port
from deployments.cluster_env import harness_ports, serve_cluster_env
from load_tests.systems.local_app import config_args as load_args
from load_tests.systems.local_app import wait_ready

CONFIGS = Path(__file__).parents[2] / "serve_configs"


# Short enough that the lease-expiry test waits seconds, not the default 30.
TEST_KV_LEASE_S = 8
# Requests waiting for a first token that the ingress admits (the default is 128).
ADMISSION_MAX_WAITING = 24


def config_args(name: str) -> dict[str, Any]:
    args = load_args(CONFIGS / name)
    if args.get("mode", "disaggregated") == "disaggregated":
        args.setdefault("transport", {})["kv_lease_s"] = TEST_KV_LEASE_S
        # Prompts of 64 tokens and more go through a remote prefill and a KV transfer,
        # so the transfer tests can use short prompts.
        args.setdefault("router", {})["local_prefill_below_tokens"] = 64
        # Tool calling as tests/integration/test_vs_vllm.py starts vLLM's server.
        args["openai"] = {
            "enable_auto_tool_choice": True,
            "tool_call_parser": "hermes",
            "enable_prompt_tokens_details": True,
        }
        # A limit tests/integration/test_overload.py can exceed with one burst. The wait
        # rules stay out of the way (a burst's slow first tokens would shed the next
        # test's requests); tests/unit/test_admission.py covers them, and
        # load_tests/reliability/overload.py measures them on real engines.
        args.setdefault("ingress", {})["admission"] = {
            "max_waiting": ADMISSION_MAX_WAITING,
            "ttft_budget_s": 3600,
        }
    else:
        # Two replicas behind the prefix-affinity router (tests/integration/test_routing.py);
        # greedy outputs do not depend on the replica, so it stays the reference.
        args["decode"]["num_replicas"] = 2
    return args


@dataclass(frozen=True)
class Apps:
    disaggregated: str  # base URL of the disaggregated app
    colocated: str  # base URL of the colocated reference app
    proxy: str  # base URL of Serve's proxy, which serves both apps too (route prefixes)
    # The disaggregated app's answer to the first request it got once ready (remote prefill).
    first_response: dict[str, Any]


def _direct_ingress_urls(first_port: int, count: int) -> dict[str, str]:
    """Route prefix -> base URL of each ingress replica's own server (direct ingress)."""
    import httpx

    urls = {}
    for port in range(first_port, first_port + count):
        routes = httpx.get(f"http://127.0.0.1:{port}/-/routes", timeout=10).json()
        for prefix in routes:
            urls[prefix] = f"http://127.0.0.1:{port}" + prefix.rstrip("/")
    return urls


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # Tests that kill replicas run last, so a replica being restarted disturbs no one.
    items.sort(key=lambda item: item.get_closest_marker("kills_replica") is not None)


@pytest.fixture(scope="session")
def apps() -> Any:
    import ray
    from ray import serve

    from deployments.builder import build_app

    direct_ports, port = harness_ports("127.0.0.1")
    with serve_cluster_env(direct_ports) as direct_port:
        # With the dashboard, as `serve run` starts Ray: it writes the Prometheus service
        # discovery file tests/integration/test_observability.py scrapes through.
        ray.init(
            num_cpus=4,
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            dashboard_port=free_port("127.0.0.1"),
            log_to_driver=False,
            namespace="splitserve-tests",
        )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(config_args("default.yaml")), name="splitserve", route_prefix="/")
        serve.run(
            build_app(config_args("colocated.yaml")), name="colocated", route_prefix="/colocated"
        )
        proxy = f"http://127.0.0.1:{port}"
        if direct_port is None:
            urls = {"/": proxy, "/colocated": f"{proxy}/colocated"}
        else:
            # The tests go the way `make run` serves: straight to each app's ingress.
            urls = _direct_ingress_urls(direct_port, 2)
        for url in (urls["/"], urls["/colocated"], proxy):
            wait_ready(url)
        yield Apps(
            disaggregated=urls["/"],
            colocated=urls["/colocated"],
            proxy=proxy,
            first_response=_first_request(urls["/"]),
        )
    finally:
        serve.shutdown()
        ray.shutdown()


def _first_request(base: str) -> dict[str, Any]:
    """The app's first request: 300 prompt tokens, so it is prefilled remotely."""
    import httpx

    body = {"model": "tiny-llama", "prompt": list(range(100, 400)), "max_tokens": 8}
    response = httpx.post(f"{base}/v1/completions", json=body, timeout=300)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


@pytest.fixture(scope="session")
def http(apps: Apps) -> Any:
    import httpx

    with httpx.Client(timeout=120) as client:
        yield client
