"""Ray Serve settings that take effect only when the Ray cluster starts with them.

Serve's HTTP proxy is started by Serve's controller, not by the app, so the app's config
cannot reach it. Two of its settings decide what each request and each streamed chunk
costs on the proxy -> ingress hop (docs/performance.md, section 7):

- ``RAY_SERVE_PROXY_USE_GRPC=1``: the proxy calls the ingress by value over Serve's gRPC
  channel instead of as Ray actor calls;
- ``RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0``: the proxy routes on its own event loop
  instead of handing each request to a second loop in another thread.

They must be in the environment of the processes that start Ray: ``make run`` exports
them for ``serve run``; with ``ray start`` or KubeRay, set them on every node. The test
and benchmark harnesses apply them with :func:`serve_cluster_env` before ``ray.init``.
A value already in the environment wins, so either can be turned off.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

SERVE_CLUSTER_ENV = {
    "RAY_SERVE_PROXY_USE_GRPC": "1",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
}


def missing_cluster_env() -> list[str]:
    """The settings this process (a replica, which inherits the node's environment) lacks."""
    return [f"{key}={value}" for key, value in SERVE_CLUSTER_ENV.items() if key not in os.environ]


@contextmanager
def serve_cluster_env() -> Iterator[None]:
    """Set the settings this process's environment lacks for the Ray processes a
    ``ray.init`` inside starts, then restore the environment."""
    # This process's own Serve reads its settings once, at import: import it first, so
    # that its handles keep working outside an event loop (a router on the caller's own
    # loop needs one).
    import ray.serve  # noqa: F401

    added = [key for key in SERVE_CLUSTER_ENV if key not in os.environ]
    os.environ.update({key: SERVE_CLUSTER_ENV[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
