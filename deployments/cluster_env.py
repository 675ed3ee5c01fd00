"""Ray Serve settings that take effect only when the Ray cluster starts with them.

Serve's HTTP proxy and its port allocation are run by Serve's controller, not by the app,
so the app's config cannot reach them (docs/performance.md, sections 7 and 9):

- ``RAY_SERVE_PROXY_USE_GRPC=1``: the proxy calls the ingress by value over Serve's gRPC
  channel instead of as Ray actor calls;
- ``RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0``: the proxy routes on its own event loop
  instead of handing each request to a second loop in another thread;
- ``RAY_SERVE_ENABLE_DIRECT_INGRESS=1`` with the HTTP port range
  ``RAY_SERVE_DIRECT_INGRESS_{MIN,MAX}_HTTP_PORT`` [8100, 8116): each ingress replica also
  serves HTTP itself, on the lowest free port of the range, so a request skips the proxy
  and its hop. Serve's proxy keeps serving ``http_options.port`` (8000) as before. With
  no load balancer in front, the drain period and the port quarantine are cut to what a
  single machine needs;
- ``RAY_SERVE_CONTROL_LOOP_INTERVAL_S=0.5`` (Serve's default 0.1): the controller's loop,
  which wakes the controller and the GCS ten times a second even when nothing changes.
  Measured idle (docs/performance.md, section 11): the controller 3.7 -> 1.7% of a core
  and the GCS 1.8 -> 0.8%; start-up and a decode replica's replacement took as long
  within run-to-run noise (the engine's start dominates both);
- ``RAY_LOG_MONITOR_MANY_FILES_THRESHOLD=0`` with ``LOG_NAME_UPDATE_INTERVAL_S=2``: Ray's
  log monitor, which streams the workers' logs to ``serve run``'s terminal, looks for new
  log files every 2 s instead of globbing the log directory ten times a second (Ray does
  the former only past 1,000 files). A new worker's first lines reach the terminal up to
  2 s later, none is lost. Measured idle (docs/performance.md, section 18): the log
  monitor 1.0 -> 0.4% of a core.

They must be in the environment of the processes that start Ray: ``make run`` exports
them for ``serve run``; with ``ray start`` or KubeRay, set them on every node. The test
and benchmark harnesses apply them with :func:`serve_cluster_env` before ``ray.init``.
A value already in the environment wins, so any of them can be turned off.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from app.net import free_listen_port, free_port_range

DIRECT_PORT_ENV = "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"
DIRECT_PORT_END_ENV = "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"  # exclusive
DIRECT_PORT_COUNT = 16  # ingress replicas one node can serve directly

# The request path's settings: without them requests take the proxy's slower path.
PATH_ENV = {
    "RAY_SERVE_PROXY_USE_GRPC": "1",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
    DIRECT_PORT_ENV: "8100",
    DIRECT_PORT_END_ENV: str(8100 + DIRECT_PORT_COUNT),
    # Without a load balancer in front (Ray pairs direct ingress with HAProxy), nothing
    # needs an ingress to keep draining 30 s when it stops, nor its port held back for
    # 150 s: a restarted ingress takes its port again at once.
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
    "RAY_SERVE_PORT_QUARANTINE_S": "0",
}
SERVE_CLUSTER_ENV = {
    **PATH_ENV,
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "2",
}


def missing_cluster_env() -> list[str]:
    """The request path's settings this process (a replica, which inherits the node's
    environment) lacks."""
    return [f"{key}={value}" for key, value in PATH_ENV.items() if key not in os.environ]


def harness_ports(host: str) -> tuple[int, int]:
    """For a harness's own cluster: the first of a free range for the ingress replicas'
    own servers (pass it to :func:`serve_cluster_env`), and a free port outside that
    range for Serve's proxy."""
    direct = free_port_range(host, DIRECT_PORT_COUNT)
    proxy = free_listen_port(host)
    while direct <= proxy < direct + DIRECT_PORT_COUNT:
        proxy = free_listen_port(host)
    return direct, proxy


@contextmanager
def serve_cluster_env(direct_ports: int | None = None) -> Iterator[int | None]:
    """Set the settings this process's environment lacks for the Ray processes a
    ``ray.init`` inside starts, then restore the environment.

    ``direct_ports``: the first of a range of free ports for the ingress replicas' own
    servers, instead of 8100 (harnesses that share a machine pass a free range). Yields
    the port the first ingress replica will serve on directly, or None if direct
    ingress is off.
    """
    # This process's own Serve reads its settings once, at import: import it first, so
    # that its handles keep working outside an event loop (a router on the caller's own
    # loop needs one).
    import ray.serve  # noqa: F401

    wanted = dict(SERVE_CLUSTER_ENV)
    if direct_ports is not None:
        wanted[DIRECT_PORT_ENV] = str(direct_ports)
        wanted[DIRECT_PORT_END_ENV] = str(direct_ports + DIRECT_PORT_COUNT)
    added = [key for key in wanted if key not in os.environ]
    os.environ.update({key: wanted[key] for key in added})
    direct = os.environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
    try:
        yield int(os.environ[DIRECT_PORT_ENV]) if direct else None
    finally:
        for key in added:
            os.environ.pop(key, None)
