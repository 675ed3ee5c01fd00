"""What the trace benchmark (:mod:`load_tests.serving.trace_bench`) sets on splitserve so
that it refuses and gives up no work vLLM's server would wait for: admission's budget
and the transport's timeouts, from the loosest SLO profile's TTFT; and which of the
shipped front-end fits its advisor charges (:func:`frontend_fit_for`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from app.config import AdmissionConfig
from app.config.transport import TransportConfig


def admission_budget(loosest_ttft_s: float) -> float:
    """The admission budget (``ttft_budget_s``) under which splitserve's admission refuses
    no request the loosest profile could still meet: each of its wait rules (the oldest
    wait at ``headroom`` of the budget, the predicted wait at ``predicted_share``) then
    fires only past that profile's TTFT."""
    rules = AdmissionConfig()
    share = min(rules.headroom, rules.predicted_share or rules.headroom)
    return math.ceil(100 * loosest_ttft_s / share) / 100


def transport_timeouts(loosest_ttft_s: float) -> dict[str, float]:
    """The transport's timeouts, each at least the loosest profile's TTFT (the shipped
    value where that is longer), and a KV lease that admits a read as late as the
    transfer may wait: on a slow host a long prompt's prefill can outrun the shipped 10 s,
    and a prefill given up is redone on decode, work vLLM's server (which gives up on
    nothing) never does."""
    shipped = TransportConfig()
    transfer = max(shipped.transfer_timeout_s, loosest_ttft_s)
    # A read is refused past kv_lease_s - (kv_lease_s // 6 + 2) s after the prefill.
    lease = max(shipped.kv_lease_s, math.ceil((transfer + 2) * 6 / 5) + 1)
    return {
        "prefill_queue_timeout_s": max(shipped.prefill_queue_timeout_s, loosest_ttft_s),
        "prefill_timeout_s": max(shipped.prefill_timeout_s, loosest_ttft_s),
        "transfer_timeout_s": transfer,
        "kv_lease_s": lease,
    }


SHIPPED_FITS = Path(__file__).resolve().parents[2] / "docs" / "results"
FALLBACK_FIT = SHIPPED_FITS / "frontend_fit_2026-12-03_by_process.json"


def fit_cpu(path: Path) -> str | None:
    """The CPU model a front-end fit was measured on (None where it does not say)."""
    machine = _read(path).get("conditions", {}).get("machine", {})
    return machine.get("cpu") if isinstance(machine, dict) else None


def frontend_fit_for(cpu: str, shipped: Path = SHIPPED_FITS) -> tuple[Path, bool]:
    """The shipped front-end fit measured on this ``cpu`` model (the newest by name,
    fits with the replicas' share apart only), and whether it matched: the serving path's
    CPU per request and per chunk differs between machine kinds as much as the engine's
    speed does (a fit from a Xeon with AVX-512 charges an AMD EPYC without it too
    little). Without one, the fallback fit, and False."""
    matching = []
    for path in sorted(shipped.glob("frontend_fit_*.json")):
        fit = _read(path)
        machine = fit.get("conditions", {}).get("machine", {})
        if isinstance(machine, dict) and machine.get("cpu") == cpu and "replica_chunk_s" in fit:
            matching.append(path)
    if matching:
        return matching[-1], True
    return FALLBACK_FIT, False


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
