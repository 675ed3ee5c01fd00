"""The metric names the shipped Grafana dashboard queries (observability/grafana/)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).parents[1] / "observability" / "grafana" / "splitserve.json"

# Counters Ray exports only from their first increment: a fallback, a request no transport
# served, a preemption, a prefix-cache hit, a migration. A healthy test run need not
# produce them, so the live check looks for these in the code that declares them instead.
EXPORTED_ON_EVENT = {
    "ray_splitserve_kv_fallbacks_total": "splitserve_kv_fallbacks",
    "ray_splitserve_kv_unserved_total": "splitserve_kv_unserved",
    "ray_vllm_num_preemptions_total": "vllm:num_preemptions",
    "ray_vllm_prefix_cache_hits_total": "vllm:prefix_cache_hits",
    "ray_splitserve_migrations_total": "splitserve_migrations",
}

_NAME = re.compile(r"\b(ray_[a-zA-Z0-9_]+)\b")


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def expressions() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def metric_names() -> set[str]:
    """Every series name the dashboard's expressions read (``ray_*``, as Ray exports them)."""
    return {name for expr in expressions() for name in _NAME.findall(expr)}
