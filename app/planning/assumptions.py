"""What a planner or advisor figure assumes, said beside it.

A plan or an advice is only as good as the engine, model, hardware and network it was
worked out for; where the command line named none of them, a default stood in, and the
output says so (the defaults are a large GPU cluster's, not the user's). ``splitserve
plan`` and ``splitserve advise`` print these lines under their tables and put them in
their JSON as ``assumes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.planning.checks import Workload

# `splitserve advise`'s hardware and network where the command line names none.
ADVISE_DEFAULTS: dict[str, Any] = {"accelerators": 8, "network_gbps": 100.0, "network": "rdma"}


def fill_advise_defaults(args: Any) -> set[str]:
    """Give ``args`` (``splitserve advise``'s) the defaults of :data:`ADVISE_DEFAULTS`
    where the command line named nothing; the names so filled."""
    defaulted = {name for name in ADVISE_DEFAULTS if getattr(args, name, None) is None}
    for name in defaulted:
        setattr(args, name, ADVISE_DEFAULTS[name])
    return defaulted


def lines(assumed: Mapping[str, str]) -> list[str]:
    """The assumptions as the tables end: a heading, one line each."""
    return ["", "assumes:", *(f"  {what}: {value}" for what, value in assumed.items())]


def for_plan(
    profile_path: str,
    conditions: Mapping[str, Any],
    model: str,
    kv_bytes: int,
    link_gbps: float,
    accelerators: int,
    frontend: str | None,
    cores: int,
) -> dict[str, str]:
    """A plan's: the engine measured (model, machine), the accelerators, the network and
    the serving path, each as given or as defaulted."""
    engine = ", ".join(
        f"{key} {conditions[key]}" for key in ("model", "cpu", "vllm") if conditions.get(key)
    )
    return {
        "engine": f"the curves of {profile_path} ({engine or 'no conditions recorded'}), "
        "one engine per accelerator",
        "model": (
            f"{model}, {kv_bytes:,} KV bytes per token"
            if link_gbps
            else f"{model} (its KV size unused: no link given)"
        ),
        "accelerators": f"{accelerators}, every layout on the same number",
        "network": (
            f"a {link_gbps:g} Gb/s link for every transfer"
            if link_gbps
            else "none: KV transfers take no time (--link-gbps 0)"
        ),
        "serving path": (
            f"{frontend}'s fit on {cores} cores shared with the engines"
            if frontend
            else "not charged beyond the profile's overheads (--frontend not given)"
        ),
    }


def for_advice(model: str, workload: Workload, defaulted: set[str]) -> dict[str, str]:
    """An advice's: the model whose KV moves, the accelerators and the network, the
    defaulted ones marked as such."""

    def said(name: str, text: str) -> str:
        return f"{text} (a default: the command line named none)" if name in defaulted else text

    network = f"{workload.network_gbps:g} Gb/s {workload.network.upper()}"
    return {
        "model": f"{model}, {workload.kv_bytes_per_token:,} KV bytes per token",
        "accelerators": said("accelerators", str(workload.accelerators)),
        "network": said("network_gbps" if "network_gbps" in defaulted else "network", network),
    }
