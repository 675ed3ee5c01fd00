"""Start a splitserve app from a serve config in this process's own Ray cluster (loopback).

For benchmarks and soak runs that need both HTTP traffic and the replicas' handles
(RSS, KV blocks held). Run it inside scripts/loopback-netns so Ray stays on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from app.config import serve_file_args, serve_file_policy
from deployments.cluster_env import harness_ports, serve_cluster_env


def config_args(path: str | Path) -> dict[str, Any]:
    """A Serve file's app args, with the reporting tests and benchmarks read: the
    ``splitserve`` field's internals and usage's cached tokens (off by default)."""
    args = serve_file_args(path)
    args.setdefault("ingress", {}).setdefault("report_internals", True)
    args.setdefault("openai", {}).setdefault("enable_prompt_tokens_details", True)
    return args


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied recursively (dicts merge, other values replace)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def wait_ready(url: str, timeout_s: float = 120.0) -> None:
    """Poll ``url``/health until it answers 200, as a client should: the ingress answers
    503 until every pool has a warm replica (app.api.readiness), which it learns a moment
    after Serve counts the pools running."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}/health did not answer 200 within {timeout_s:g} s")
        time.sleep(0.2)


class LocalApp:
    """A Ray cluster + one Serve app; use as a context manager."""

    def __init__(
        self,
        config_path: str | Path,
        num_cpus: int = 2,
        name: str = "splitserve",
        overrides: dict[str, Any] | None = None,
        cluster_env: bool = True,
        metrics_report_interval_ms: int | None = None,
    ):
        self.config_path = Path(config_path)
        self.overrides = overrides or {}
        self.num_cpus = num_cpus
        self.name = name
        self.url = ""  # where clients go: the ingress's own server, else the proxy
        self.proxy_url = ""  # Serve's proxy
        self.cluster_env = cluster_env
        # How often Ray exports metrics (its default is 10 s); shorter for benchmarks that
        # read /metrics around each workload.
        self.metrics_report_interval_ms = metrics_report_interval_ms

    def __enter__(self) -> LocalApp:
        import ray
        from ray import serve

        from deployments.builder import build_app

        direct_ports, port = harness_ports("127.0.0.1")
        with (
            serve_cluster_env(direct_ports) if self.cluster_env else contextlib.nullcontext()
        ) as direct_port:
            system = {}
            if self.metrics_report_interval_ms is not None:
                system["metrics_report_interval_ms"] = self.metrics_report_interval_ms
            ray.init(
                num_cpus=self.num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                _system_config=system or None,
            )
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            args = merge(config_args(self.config_path), self.overrides)
            policy = serve_file_policy(self.config_path)
            if policy is None:
                serve.run(build_app(args), name=self.name, route_prefix="/")
            else:
                self._deploy_with_policy(args, policy)
        except BaseException:
            self.__exit__()  # a failed start leaves no cluster behind
            raise
        self.proxy_url = f"http://127.0.0.1:{port}"
        # With direct ingress (the cluster settings' default) the app's one ingress
        # replica serves on the range's first port, without the proxy's hop.
        self.url = f"http://127.0.0.1:{direct_port}" if direct_port else self.proxy_url
        try:
            wait_ready(self.url)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _deploy_with_policy(self, args: dict[str, Any], policy: dict[str, Any]) -> None:
        """Deploy as ``serve run`` deploys a config file: Serve takes an application-level
        autoscaling policy only from a config, not from ``serve.run``."""
        from ray.serve.context import _get_global_client
        from ray.serve.schema import ServeDeploySchema

        from app.config.serve_file import IMPORT_PATH

        application = {
            "name": self.name,
            "route_prefix": "/",
            "import_path": IMPORT_PATH,
            "args": args,
            "autoscaling_policy": policy,
        }
        client = _get_global_client()
        assert client is not None  # serve.start() ran
        client.deploy_apps(ServeDeploySchema.model_validate({"applications": [application]}))
        client._wait_for_application_running(self.name, timeout_s=900)

    def handle(self, deployment: str) -> Any:
        from ray import serve

        return serve.get_deployment_handle(deployment, app_name=self.name)

    def __exit__(self, *exc: object) -> None:
        import ray
        from ray import serve

        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
