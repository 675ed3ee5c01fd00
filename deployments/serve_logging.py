"""Serve's replica log handler, kept working through vLLM's logging set-up.

vLLM applies its logging config (``logging.config.dictConfig``) the first time a process
builds an engine config (``EngineArgs.create_engine_config``: the ingress for its OpenAI
layer, an engine replica for its engine), and ``dictConfig`` closes every handler that
exists. Serve installs its replica's handler before the replica's constructor runs: a
``MemoryHandler`` (capacity 1) in front of the replica's log file. Closed, it loses its
target, so it no longer writes the replica's log file, and since a ``MemoryHandler``
empties its buffer only into a target, it keeps every record from then on: one access
log line per request, a few KiB each, for the replica's life (seen as the ingress's
and decode replicas' memory growing under load, while Serve's log files fell silent).

:func:`keeping_serve_logs` wraps a replica's constructor and puts the targets back.
"""

from __future__ import annotations

import functools
import inspect
import logging
import logging.handlers
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

SERVE_LOGGER = "ray.serve"
F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def serve_logs_kept() -> Iterator[None]:
    """Run the body, then give Serve's buffering handlers back the targets the body's
    logging set-up took from them (records they kept meanwhile go there then)."""
    handlers = logging.getLogger(SERVE_LOGGER).handlers
    kept = [(h, h.target) for h in handlers if isinstance(h, logging.handlers.MemoryHandler)]
    try:
        yield
    finally:
        for handler, target in kept:
            if handler.target is None and target is not None:
                handler.setTarget(target)
                handler.flush()


def keeping_serve_logs(init: F) -> F:
    """A replica constructor (plain or ``async``) run within :func:`serve_logs_kept`."""
    if inspect.iscoroutinefunction(init):

        @functools.wraps(init)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with serve_logs_kept():
                return await init(*args, **kwargs)

        return cast(F, run_async)

    @functools.wraps(init)
    def run(*args: Any, **kwargs: Any) -> Any:
        with serve_logs_kept():
            return init(*args, **kwargs)

    return cast(F, run)
