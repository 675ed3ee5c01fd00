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
``WorkerId``; the node as a digest of its address, not the address) keep series from
different processes apart; Ray's constant labels are
dropped. Ray exports every ``metrics_report_interval_ms`` (10 s by default), so a value
here is up to that old.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Ray's prefix on what the app recorded -> the name it is served under.
_RENAMES = (("ray_vllm_", "vllm:"), ("ray_splitserve_", "splitserve_"))
_LABEL_RENAMES = {"ReplicaId": "replica", "NodeAddress": "node", "WorkerId": "worker"}
_DROP_LABELS = {"Component", "SessionName", "Version"}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def served_name(name: str) -> str | None:
    """The name a Ray-exported series is served under here, or None if it is not served."""
    for prefix, served in _RENAMES:
        if name.startswith(prefix):
            return served + name[len(prefix) :]
    return None


def _relabel(labels: dict[str, str], application: str) -> dict[str, str] | None:
    """The served label set, or None if the series belongs to another application."""
    if labels.get("application") != application:
        return None
    served = {
        _LABEL_RENAMES.get(key, key): value
        for key, value in labels.items()
        if key not in _DROP_LABELS and not key.startswith("otel_scope_")
    }
    if "node" in served:  # apart, but not the cluster's addresses, on an open page
        served["node"] = hashlib.sha256(served["node"].encode()).hexdigest()[:12]
    return served


class _Page:
    """The served families, in the form prometheus_client's exposition writer collects."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(exports: Iterable[str], application: str) -> str:
    """One Prometheus text page of ``application``'s series, from the text of each node's
    Ray metrics export (read and written by prometheus_client). Families seen on several
    nodes share one HELP/TYPE header; a family with no sample of this application is
    left out."""
    families: dict[str, Metric] = {}
    for text in exports:
        for family in text_string_to_metric_families(text):
            served = served_name(family.name)
            if served is None:
                continue
            samples = []
            for sample in family.samples:
                labels = _relabel(sample.labels, application)
                if labels is not None:
                    name = served + sample.name[len(family.name) :]
                    samples.append(Sample(name, labels, sample.value, sample.timestamp))
            if not samples:
                continue
            kept = families.get(served)
            if kept is None:
                kept = families[served] = Metric(served, family.documentation, family.type)
            kept.samples.extend(samples)
    return generate_latest(_Page(families.values())).decode()  # type: ignore[arg-type]
