"""SLO profiles that match what teams promise, scaled to the engines' speed, and the
goodput of a ladder of rate scales under each.

Each profile is stated for a reference engine (a 7-8B model on one datacenter GPU) that
prefills 1,024 tokens in ``REFERENCE_PREFILL_1K_S`` and takes ``REFERENCE_DECODE_STEP_S``
for a one-sequence decode step, and scaled to the engines at hand by two stated factors
(:func:`speed_factors`): the TTFT bound by their prefill time over the reference's, the
TPOT bound and the per-token deadline by their decode step over the reference's (a CPU
engine's prefill and decode are not slower than a GPU's by one factor). Three profiles:

- ``chat``: interactive chat; the first token soon, the rest at reading speed (tight
  TTFT, loose TPOT). Met by a request within both bounds; the profile holds while at
  least 90% of requests meet it (DistServe's attainment).
- ``smooth``: smooth streaming; every token by its deadline (Etalon's fluidity-index at
  a per-token deadline with slack), so one stall of a stream counts, which mean TPOT
  hides. The profile holds while the fluidity-index is at least 0.99 and 90% of first
  tokens come within its TTFT.
- ``throughput``: batch-like work; loose bounds on both, 90% attainment.

Goodput under a profile is the highest rate scale at which the profile holds
(:func:`goodput_scale`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from app.replay.slo import Slo, attainment, fluidity_index

# The reference engine the profiles are stated for: its time to prefill 1,024 tokens, and
# its one-sequence decode step (a 7-8B model in bf16 on one H100-class GPU: ~16 TFLOP of
# prefill at ~40% of peak; ~16 GB of weights read per step at ~3 TB/s).
REFERENCE_PREFILL_1K_S = 0.05
REFERENCE_DECODE_STEP_S = 0.007
# The share of first tokens within TTFT that the smooth profile also asks.
TTFT_TARGET = 0.9


@dataclass(frozen=True)
class SloProfile:
    name: str
    ttft_s: float
    tpot_s: float  # chat / throughput: mean TPOT bound; smooth: each token's deadline
    measure: Literal["attainment", "fluidity"]
    target: float
    promise: str

    def scaled(self, factors: SpeedFactors) -> SloProfile:
        return replace(
            self, ttft_s=self.ttft_s * factors.prefill, tpot_s=self.tpot_s * factors.decode
        )

    @property
    def slo(self) -> Slo:
        return Slo(self.ttft_s, self.tpot_s)

    def stated(self) -> dict[str, Any]:
        found = asdict(self)
        found["ttft_ms"] = round(found.pop("ttft_s") * 1000, 1)
        found["tpot_ms"] = round(found.pop("tpot_s") * 1000, 1)
        return found

    def measures(self, streams: Sequence[tuple[Sequence[float], int]]) -> dict[str, float]:
        """The profile's measures over a run, from each request's token arrival times
        (seconds from its arrival; empty for a request refused or failed) and its token
        count: ``attainment`` (both bounds), and for ``smooth`` also ``fluidity`` and
        ``ttft_attainment`` (the share of first tokens in time: a stream that starts
        late misses one deadline of hundreds, which the fluidity-index alone forgives)."""
        outcomes = [ttft_tpot(times) for times, _ in streams]
        if self.measure == "fluidity":
            firsts = [(ttft, None) for ttft, _ in outcomes]
            return {
                "fluidity": round(fluidity_index(streams, self.slo), 4),
                "ttft_attainment": round(attainment(firsts, self.slo), 4),
            }
        return {"attainment": round(attainment(outcomes, self.slo), 4)}

    def margin(self, measures: dict[str, float]) -> float:
        """How far the run is inside the profile (>= 0: it holds): the measure less its
        target; for ``smooth`` the lesser of the fluidity-index less its target and the
        TTFT attainment less ``TTFT_TARGET``."""
        if self.measure == "fluidity":
            return min(
                measures["fluidity"] - self.target, measures["ttft_attainment"] - TTFT_TARGET
            )
        return measures["attainment"] - self.target

    def holds(self, measures: dict[str, float]) -> bool:
        return self.margin(measures) >= 0


def ttft_tpot(times: Sequence[float]) -> tuple[float | None, float | None]:
    if not times:
        return None, None
    if len(times) < 2:
        return times[0], None
    return times[0], (times[-1] - times[0]) / (len(times) - 1)


PROFILES: tuple[SloProfile, ...] = (
    SloProfile(
        "chat", 0.5, 0.15, "attainment", 0.9, "first token within 0.5 s, then reading speed"
    ),
    SloProfile("smooth", 2.0, 0.05, "fluidity", 0.99, "every token within 50 ms of its deadline"),
    SloProfile("throughput", 10.0, 0.5, "attainment", 0.9, "loose: work done, not waited on"),
)


@dataclass(frozen=True)
class SpeedFactors:
    """How many times slower these engines are than the reference: at prefill (scales
    TTFT bounds) and at a decode step (scales TPOT bounds and token deadlines)."""

    prefill: float
    decode: float

    def stated(self) -> dict[str, float]:
        return {"prefill": round(self.prefill, 3), "decode": round(self.decode, 3)}


def speed_factors(prefill_1k_s: float, decode_step_s: float) -> SpeedFactors:
    """The factors from the engines' time to prefill 1,024 tokens and their one-sequence
    decode step (both from ``splitserve profile``)."""
    if prefill_1k_s <= 0 or decode_step_s <= 0:
        raise ValueError("prefill and decode times must be positive")
    return SpeedFactors(
        prefill_1k_s / REFERENCE_PREFILL_1K_S, decode_step_s / REFERENCE_DECODE_STEP_S
    )


def scaled_profiles(factors: SpeedFactors) -> list[SloProfile]:
    return [profile.scaled(factors) for profile in PROFILES]


def goodput_scale(points: Sequence[tuple[float, float]]) -> float:
    """The highest rate scale at which a profile holds, from ``points`` (rate scale, the
    profile's margin: >= 0 where it holds), as DistServe reads goodput off an attainment
    curve: climbing the rates in order, the last that holds before the first that does
    not, moved towards that one by linear interpolation of the margin to 0. 0 where even
    the lowest fails; the highest rate where none fails (a lower bound)."""
    best = 0.0
    previous: tuple[float, float] | None = None
    for rate, margin in sorted(points):
        if margin >= 0:
            best, previous = rate, (rate, margin)
            continue
        if previous is not None:
            (r0, m0), (r1, m1) = previous, (rate, margin)
            best = r0 + (r1 - r0) * m0 / (m0 - m1)
        break
    return round(best, 4)
