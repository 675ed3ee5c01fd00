"""Five checks before disaggregating, each a number against a threshold.

1. Decode share of request time: below 70%, the decode pool has little to gain from
   running alone (prefill interference is not where the time goes).
2. KV bytes per request vs the network: more than 500 MB per request on a link slower
   than 100 Gb/s puts a transfer of tens to hundreds of ms into every TTFT.
3. Prefix-cache hit rate: at 80% or more most prompts are barely prefilled at all, so
   a separate prefill pool has little work and disaggregation loses value.
4. Accelerator count: below about 16, splitting into two pools leaves each too small to
   absorb bursts, and the transfer and orchestration overhead wins.
5. Network kind: TCP-only links cost copies and CPU per transfer; RDMA moves KV without
   the host's CPU.

Each check says ``favours`` or ``against`` (disaggregation); the summary recommends
``disaggregate`` when none is against, ``measure first`` (try conditional
disaggregation and load-test it) when one or two are, and ``stay colocated`` otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from app.planning.kv_size import NetworkKind, transfer_seconds

Verdict = Literal["favours", "against"]

DECODE_SHARE_MIN = 0.70
KV_BYTES_MAX = 500e6
SLOW_NETWORK_GBPS = 100.0
PREFIX_HIT_MAX = 0.80
ACCELERATORS_MIN = 16


@dataclass(frozen=True)
class Workload:
    """What the advisor needs to know; from stated figures or a load-test result."""

    prompt_tokens: float
    output_tokens: float
    kv_bytes_per_token: int
    decode_share: float  # share of a request's time spent generating after the first token
    prefix_hit_rate: float = 0.0
    accelerators: int = 8
    network_gbps: float = 100.0
    network: NetworkKind = "rdma"

    def __post_init__(self) -> None:
        if not 0 <= self.decode_share <= 1 or not 0 <= self.prefix_hit_rate <= 1:
            raise ValueError("decode_share and prefix_hit_rate are shares in [0, 1]")
        if self.prompt_tokens < 0 or self.output_tokens < 0 or self.accelerators < 1:
            raise ValueError("token counts must be >= 0 and accelerators >= 1")
        if self.network_gbps <= 0:
            raise ValueError("network_gbps must be positive")

    @property
    def kv_bytes_per_request(self) -> float:
        """KV bytes a prefill sends for one prompt (the cached prefix is not recomputed,
        but decode still needs all of it)."""
        return self.prompt_tokens * self.kv_bytes_per_token


@dataclass(frozen=True)
class Check:
    name: str
    value: float
    threshold: float
    unit: str
    verdict: Verdict
    why: str


@dataclass
class Advice:
    checks: list[Check]
    recommendation: str = ""
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The advice with each check's value and threshold as they are (a share as 0-1,
        a size in bytes), and ``unit`` naming that unit, not the table's display unit."""
        return {
            "recommendation": self.recommendation,
            "reasons": self.reasons,
            "checks": [
                {**asdict(check), "unit": _VALUE_UNITS.get(check.unit, check.unit)}
                for check in self.checks
            ],
        }

    def table(self) -> str:
        lines = [f"{'check':<24} {'value':>14} {'threshold':>14}  verdict   why"]
        for c in self.checks:
            lines.append(
                f"{c.name:<24} {_fmt(c.value, c.unit):>14} {_fmt(c.threshold, c.unit):>14}"
                f"  {c.verdict:<8}  {c.why}"
            )
        lines.append("")
        lines.append(f"recommendation: {self.recommendation}")
        lines.extend(f"  - {reason}" for reason in self.reasons)
        return "\n".join(lines)


# A check's display unit (the table's) -> the unit its raw value is in (the JSON's).
_VALUE_UNITS = {"%": "fraction", "MB": "bytes", "kind": "1 = RDMA, 0 = TCP"}


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "MB":
        return f"{value / 1e6:,.1f} MB"
    if unit == "Gb/s":
        return f"{value:g} Gb/s"
    if unit == "kind":
        return "RDMA" if value else "TCP"
    return f"{value:g}"


def decode_share(w: Workload) -> Check:
    ok = w.decode_share >= DECODE_SHARE_MIN
    return Check(
        "decode share of time",
        w.decode_share,
        DECODE_SHARE_MIN,
        "%",
        "favours" if ok else "against",
        "decode dominates; isolating it protects ITL"
        if ok
        else "most time is prefill; a decode pool of its own gains little",
    )


def kv_bytes_vs_network(w: Workload) -> Check:
    nbytes = w.kv_bytes_per_request
    seconds = transfer_seconds(nbytes, w.network_gbps, w.network)
    hurts = nbytes > KV_BYTES_MAX and w.network_gbps < SLOW_NETWORK_GBPS
    return Check(
        "KV bytes per request",
        nbytes,
        KV_BYTES_MAX,
        "MB",
        "against" if hurts else "favours",
        f"~{seconds * 1000:,.1f} ms per transfer at {w.network_gbps:g} Gb/s {w.network.upper()}"
        + ("; over 500 MB on < 100 Gb/s lands in every TTFT" if hurts else ""),
    )


def prefix_hit_rate(w: Workload) -> Check:
    high = w.prefix_hit_rate >= PREFIX_HIT_MAX
    return Check(
        "prefix-cache hit rate",
        w.prefix_hit_rate,
        PREFIX_HIT_MAX,
        "%",
        "against" if high else "favours",
        "most prompts are cached; little prefill work to separate"
        if high
        else "prompts need real prefill work",
    )


def accelerator_count(w: Workload) -> Check:
    few = w.accelerators < ACCELERATORS_MIN
    return Check(
        "accelerators",
        w.accelerators,
        ACCELERATORS_MIN,
        "",
        "against" if few else "favours",
        "two small pools absorb bursts badly; overhead wins"
        if few
        else "enough to size each pool for its own bottleneck",
    )


def network_kind(w: Workload) -> Check:
    rdma = w.network == "rdma"
    return Check(
        "network kind",
        1.0 if rdma else 0.0,
        1.0,
        "kind",
        "favours" if rdma else "against",
        "RDMA moves KV without the host CPU"
        if rdma
        else "TCP copies through both hosts' CPUs per transfer",
    )


CHECKS = (decode_share, kv_bytes_vs_network, prefix_hit_rate, accelerator_count, network_kind)


def advise(workload: Workload) -> Advice:
    advice = Advice([check(workload) for check in CHECKS])
    against = [c for c in advice.checks if c.verdict == "against"]
    if not against:
        advice.recommendation = "disaggregate"
        advice.reasons = ["every check favours separate prefill and decode pools"]
    elif len(against) <= 2:
        advice.recommendation = "measure first"
        advice.reasons = [f"{c.name}: {c.why}" for c in against] + [
            "try conditional disaggregation (long prompts only) and compare with "
            "`load_tests.serving.compare` before committing"
        ]
    else:
        advice.recommendation = "stay colocated"
        advice.reasons = [f"{c.name}: {c.why}" for c in against]
    return advice
