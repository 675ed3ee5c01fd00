"""Binding an engine's processes to the cores its pool was given."""

from __future__ import annotations

import logging
import re

from app.cpu_affinity import CORE_LIST, pin_children

logger = logging.getLogger("splitserve.engine")


def bind_engine(cpu_binding: str | None, pool: str) -> None:
    """Bind every thread of the engine processes this replica started to ``cpu_binding``.

    vLLM applies ``VLLM_CPU_OMP_THREADS_BIND`` only in the worker processes of its ``mp``
    executor. With ``uni`` nothing binds the engine, and on a CPU platform vLLM's NIXL
    connector moves the model's thread to the last core of each NUMA node, so every
    prefill and decode engine on a host computes on the same core. Bound here, once the
    engine runs, each engine computes on its own cores. ``None``, ``all`` and ``nobind``
    leave vLLM's choice.
    """
    if cpu_binding is None or not re.fullmatch(CORE_LIST, cpu_binding):
        return
    cores, pids = pin_children(cpu_binding, f"{pool}.cpu_binding")
    logger.info("engine processes %s bound to cores %s", pids, sorted(cores))
