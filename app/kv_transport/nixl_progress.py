"""vLLM plugin: run NIXL without its busy-polling progress thread, when splitserve asks.

NIXL's Python agent starts a progress thread that polls UCX with no delay between polls
(``nixl._api`` sets ``pthrDelay = 0``): every engine with a NIXL connector burns a whole
core while idle (measured: 92-95% of a core per engine, docs/performance.md). vLLM does
not need that thread: its connector drives UCX itself on every engine step (posting
READs and polling their state on decode, polling notifications on prefill), and a READ
between shared-memory or RDMA peers completes without the target's CPU.

vLLM builds the NIXL agent inside its worker process, which splitserve code does not
otherwise run in; vLLM loads "general plugins" (entry point group
``vllm.general_plugins``) in every process it starts, before the KV connector is built.
This plugin is registered there by ``pyproject.toml``. It changes nothing unless the
engine's environment has ``SPLITSERVE_NIXL_PROGRESS_THREAD=0``, which
:func:`app.engine_setup.engine_environment` sets when ``transport.nixl_progress_thread`` is false.
"""

from __future__ import annotations

import os
import sys
from typing import Any

ENV = "SPLITSERVE_NIXL_PROGRESS_THREAD"
_WORKER_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker"


def without_progress_thread(config_class: Any) -> Any:
    """A drop-in for ``nixl_agent_config`` that never starts the progress thread."""

    def make_config(*args: Any, **kwargs: Any) -> Any:
        kwargs["enable_prog_thread"] = False
        return config_class(*args, **kwargs)

    make_config.splitserve_wrapped = config_class  # type: ignore[attr-defined]
    return make_config


def register() -> None:
    """vLLM's plugin hook: install the wrapper where vLLM's NIXL worker looks it up."""
    if os.environ.get(ENV, "1") != "0":
        return
    from vllm.distributed import nixl_utils

    original = nixl_utils.nixl_agent_config  # resolves NIXL lazily; None without NIXL
    if original is None or hasattr(original, "splitserve_wrapped"):
        return
    wrapped = without_progress_thread(original)
    nixl_utils.nixl_agent_config = wrapped  # type: ignore[attr-defined]
    worker = sys.modules.get(_WORKER_MODULE)
    if worker is not None:  # already imported: it bound the name at import time
        worker.nixl_agent_config = wrapped  # type: ignore[attr-defined]
