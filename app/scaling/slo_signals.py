"""What the SLO policy (:mod:`app.scaling.slo_policy`) reads and answers: each pool's signals over
the look-back period, the policy's tuning, and its decision with the reason."""

from __future__ import annotations

from dataclasses import dataclass

PREFILL = "prefill"
DECODE = "decode"


@dataclass(frozen=True)
class PoolSignals:
    """One pool over the look-back period: rates and busy summed over its replicas,
    latency percentiles and KV usage at their worst replica, queues summed."""

    replicas: int  # the pool's current target
    min_replicas: int = 1
    max_replicas: int = 1
    requests_per_s: float = 0.0
    busy: float = 0.0
    # Prompt tokens per second that reached the pool's replicas, and that their engines
    # prefilled (prefill pool; 0: not reported).
    arrived_tokens_per_s: float = 0.0
    prefilled_tokens_per_s: float = 0.0
    ttft_s: float | None = None  # None: nothing measured
    tpot_s: float | None = None
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    # Requests the pool's replicas hold and that are queued for them (what Serve's
    # default policy counts; this policy does not read it).
    ongoing: float = 0.0
    # Replicas taking traffic now (what the figures above were measured on); the rest of
    # the target is still starting. None: all of them.
    serving: int | None = None

    @property
    def taking_traffic(self) -> int:
        """Replicas the figures were measured on: the target, less those starting."""
        return self.replicas if self.serving is None else min(self.serving, self.replicas)

    @property
    def starting(self) -> int:
        """Replicas asked for that do not take traffic yet."""
        return self.replicas - self.taking_traffic


@dataclass(frozen=True)
class PolicyParams:
    ttft_s: float
    tpot_s: float
    upscale_cooldown_s: float = 15.0
    downscale_delay_s: float = 60.0
    headroom: float = 0.7
    kv_target: float = 0.85
    min_prefill_per_decode: float | None = None
    max_prefill_per_decode: float | None = None
    # A prefill engine's utilization never planned above this, however loose the budget
    # (nor below half of it, however tight).
    max_utilization: float = 0.9
    # Decode's part of TTFT (the KV's arrival and the first step, or a local prefill)
    # counts against prefill's budget up to this share of the target; beyond it, decode
    # grows.
    decode_ttft_share: float = 0.5
    # ... and grows decode only while decode engines are at least this busy.
    decode_busy: float = 0.5
    # The most replicas both pools may hold together (a cluster's size); None: no bound.
    max_total_replicas: int | None = None


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str

    def direction(self, current: int) -> str:
        if self.replicas > current:
            return "up"
        return "down" if self.replicas < current else "hold"
