"""vLLM plugin: NIXL's progress thread, made to wait between polls instead of spinning.

NIXL's progress thread drives UCX in the background. It is needed wherever the target
side of a transfer must act: a READ over TCP is served by the prefill engine's UCX worker
(an active message on the target), so without the thread it completes only while the
prefill engine happens to step. Measured (two processes, UCX_TLS=tcp, idle target): with
no thread the READ never completes; with it, 16 MiB arrives in ~20 ms. vLLM's decode
engine then holds the request's KV blocks until the READ ends, which may be never.

NIXL's Python agent sets the thread's delay to zero (``nixl._api``: ``pthrDelay = 0``),
so the thread polls without pause and keeps one core busy per engine even when idle
(measured: 92-95% of a core per engine, docs/performance.md). Given a delay, the thread
waits in ``poll()`` on UCX's event descriptor, waking as soon as the network has
something and at least every delay (measured: 0.6% of a core idle at 5 ms).

vLLM builds the agent inside its worker process, which splitserve code does not otherwise
run in; vLLM loads "general plugins" (entry point group ``vllm.general_plugins``) in every
process it starts, before the KV connector is built. This plugin is registered there by
``pyproject.toml``. It reads two variables, which
:func:`app.engine.setup.engine_environment` sets from ``transport``:

- ``SPLITSERVE_NIXL_PROGRESS_POLL_US``: the thread's longest wait between polls (NIXL
  rounds it up to whole milliseconds). Unset or 0: NIXL's own busy polling.
- ``SPLITSERVE_NIXL_PROGRESS_THREAD=0``: no progress thread at all.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

ENV = "SPLITSERVE_NIXL_PROGRESS_THREAD"
POLL_ENV = "SPLITSERVE_NIXL_PROGRESS_POLL_US"
_WORKER_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker"


def without_progress_thread(config_class: Any) -> Any:
    """A drop-in for ``nixl_agent_config`` that never starts the progress thread."""

    def make_config(*args: Any, **kwargs: Any) -> Any:
        kwargs["enable_prog_thread"] = False
        return config_class(*args, **kwargs)

    make_config.splitserve_wrapped = config_class  # type: ignore[attr-defined]
    return make_config


def with_poll_delay(agent_config_class: Any, delay_us: int) -> Any:
    """A subclass of NIXL's native agent config whose progress-thread delay is at least
    ``delay_us``: ``nixl_agent`` assigns 0 to it, the subclass keeps the larger value."""
    delay = agent_config_class.pthrDelay  # the native property

    class PausingAgentConfig(agent_config_class):  # type: ignore[misc, valid-type]
        splitserve_wrapped = agent_config_class

        @property
        def pthrDelay(self) -> int:
            return int(delay.__get__(self))

        @pthrDelay.setter
        def pthrDelay(self, value: int) -> None:
            delay.__set__(self, max(int(value), delay_us))

    return PausingAgentConfig


def register() -> None:
    """vLLM's plugin hook: apply the environment's progress-thread settings to NIXL."""
    if os.environ.get(ENV, "1") == "0":
        _disable_thread()
    else:
        _pause_thread(int(os.environ.get(POLL_ENV, "0") or 0))


def _disable_thread() -> None:
    from vllm.distributed import nixl_utils

    original = nixl_utils.nixl_agent_config  # resolves NIXL lazily; None without NIXL
    if original is None or hasattr(original, "splitserve_wrapped"):
        return
    wrapped = without_progress_thread(original)
    nixl_utils.nixl_agent_config = wrapped  # type: ignore[attr-defined]
    worker = sys.modules.get(_WORKER_MODULE)
    if worker is not None:  # already imported: it bound the name at import time
        worker.nixl_agent_config = wrapped  # type: ignore[attr-defined]


def _pause_thread(delay_us: int) -> None:
    if delay_us <= 0:
        return
    from vllm.distributed import nixl_utils

    agent_config = nixl_utils.nixl_agent_config  # vLLM's lazy NIXL import; None without NIXL
    if agent_config is None:
        return
    agent_config = getattr(agent_config, "splitserve_wrapped", agent_config)
    # ``nixl_agent`` builds its native config from its own module's ``nixlBind``.
    bindings = importlib.import_module(agent_config.__module__).nixlBind
    current = bindings.nixlAgentConfig
    native = getattr(current, "splitserve_wrapped", current)
    bindings.nixlAgentConfig = with_poll_delay(native, delay_us)
