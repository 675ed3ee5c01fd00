"""``GET /metrics`` on the API port: this app's series, as vLLM's own server names them.

The series come from Ray's metrics export (every node's metrics agent, the targets of
Ray's Prometheus service discovery), so ``/metrics`` and a Prometheus that scrapes Ray
show the same numbers. From that export this page keeps the series of its own Serve
application (label ``application``; other apps in the cluster serve theirs):

- vLLM's engine series (``ray_vllm_<name>``), renamed back to ``vllm:<name>`` so tools
  that follow vLLM's layout (AIPerf, planners) find them;
- the app's own series (``ray_splitserve_<name>``), as ``splitserve_<name>``.

Labels: ``pool`` (prefill / decode / colocated) and ``replica`` (the Serve replica, Ray's
``ReplicaId``) on engine series; ``node`` and ``worker`` (Ray's ``NodeAddress`` and
``WorkerId``) keep series from different processes apart; Ray's constant labels are
dropped. Ray exports every ``metrics_report_interval_ms`` (10 s by default), so a value
here is up to that old.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Ray's prefix on what the app recorded -> the name it is served under.
_RENAMES = (("ray_vllm_", "vllm:"), ("ray_splitserve_", "splitserve_"))
_LABEL_RENAMES = {"ReplicaId": "replica", "NodeAddress": "node", "WorkerId": "worker"}
_DROP_LABELS = {"Component", "SessionName", "Version"}
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def served_name(name: str) -> str | None:
    """The name a Ray-exported series is served under here, or None if it is not served."""
    for prefix, served in _RENAMES:
        if name.startswith(prefix):
            return served + name[len(prefix) :]
    return None


@dataclass
class _Family:
    help: str = ""
    type: str = ""
    samples: list[str] = field(default_factory=list)


def _relabel(labels: str, application: str) -> str | None:
    """The served label set, or None if the series belongs to another application."""
    kept = []
    mine = False
    for key, value in _LABEL.findall(labels):
        if key == "application":
            mine = value == application
        if key in _DROP_LABELS or key.startswith("otel_scope_"):
            continue
        kept.append(f'{_LABEL_RENAMES.get(key, key)}="{value}"')
    return ",".join(kept) if mine else None


def _sample(line: str, application: str) -> str | None:
    """The served form of one exposition sample line, None if it is not served."""
    brace = line.find("{")
    space = line.find(" ")
    if brace == -1 or (space != -1 and space < brace):
        return None  # no labels, so no application: not this app's
    name = served_name(line[:brace])
    if name is None:
        return None
    close = line.rindex("}")
    labels = _relabel(line[brace + 1 : close], application)
    if labels is None:
        return None
    return f"{name}{{{labels}}}{line[close + 1 :]}"


def render(exports: Iterable[str], application: str) -> str:
    """One Prometheus text page of ``application``'s series, from the text of each node's
    Ray metrics export. Families seen on several nodes share one HELP/TYPE header; a
    family with no sample of this application is left out."""
    families: dict[str, _Family] = {}
    for text in exports:
        current: _Family | None = None
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                kind, _, rest = line[2:].partition(" ")
                name, _, value = rest.partition(" ")
                served = served_name(name)
                current = None if served is None else families.setdefault(served, _Family())
                if current is not None:
                    setattr(current, kind.lower(), value)
                continue
            if not line or line.startswith("#") or current is None:
                continue
            sample = _sample(line, application)
            if sample is not None:
                current.samples.append(sample)
    out = []
    for name, family in families.items():
        if not family.samples:
            continue
        if family.help:
            out.append(f"# HELP {name} {family.help}")
        if family.type:
            out.append(f"# TYPE {name} {family.type}")
        out.extend(family.samples)
    return "\n".join(out) + "\n"
