"""The SLO policy's rules for one pool at a time: how many replicas prefill needs for
the TTFT budget and decode for the TPOT target, growing at once and shrinking only after
``downscale_delay_s`` of room (:mod:`app.scaling.slo_policy` explains the models and
arbitrates between the pools)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.scaling.slo_signals import DECODE, PREFILL, Decision, PolicyParams, PoolSignals


@dataclass
class PoolMemory:
    """What the policy remembers about a pool between ticks."""

    last_change_s: float = -math.inf
    last_growth_s: float = -math.inf
    shrink_ok_since_s: float | None = None


@dataclass
class PoolRules:
    """Each pool's own decision, from its signals; ``memory`` is kept between ticks."""

    params: PolicyParams
    memory: dict[str, PoolMemory] = field(default_factory=dict)

    # --- prefill ---

    def ttft_budget_s(self, decode: PoolSignals) -> float:
        """The TTFT target less decode's share of it, which counts for at most
        ``decode_ttft_share`` of the target (beyond that, decode is what must grow)."""
        spent = min(decode.ttft_s or 0.0, self.params.decode_ttft_share * self.params.ttft_s)
        return self.params.ttft_s - spent

    @staticmethod
    def prefill_demand(pool: PoolSignals) -> float:
        """Engine-seconds per second the arriving prompts need: the busy share, scaled up
        by arriving over prefilled prompt tokens while prompts arrive faster."""
        if pool.arrived_tokens_per_s > pool.prefilled_tokens_per_s > 0:
            return pool.busy * pool.arrived_tokens_per_s / pool.prefilled_tokens_per_s
        return pool.busy

    def prefill_needed(self, pool: PoolSignals, budget_s: float) -> int:
        """Replicas for the pool's load to meet ``budget_s`` (queueing model). When one
        prefill alone takes about the budget, more replicas cannot make it faster: then
        only enough to keep up at half of ``max_utilization``."""
        demand = self.prefill_demand(pool)
        if pool.requests_per_s <= 0 or demand <= 0:
            return 0
        utilization = min(self.params.max_utilization, 1 - self._service(pool) / budget_s)
        return math.ceil(demand / max(utilization, self.params.max_utilization / 2))

    def prefill_decision(self, pool: PoolSignals, decode: PoolSignals, now_s: float) -> Decision:
        budget = self.ttft_budget_s(decode)
        needed = self.prefill_needed(pool, budget)
        reasons = []
        if needed > pool.replicas:
            demand = self.prefill_demand(pool)
            reasons.append(
                f"load needs {needed} for a TTFT budget of {budget * 1e3:.0f} ms "
                f"({demand:.2f} engine-s/s)"
            )
        # Over budget through queueing (not because one prefill takes that long).
        if pool.ttft_s is not None and pool.ttft_s > budget > self._service(pool):
            over = pool.ttft_s / budget
            needed = max(needed, proportional(pool.taking_traffic, over))
            reasons.append(
                f"prefill TTFT {pool.ttft_s * 1e3:.0f} ms over budget {budget * 1e3:.0f} ms"
            )
        if reasons:
            return self.grow(PREFILL, pool, needed, "; ".join(reasons), now_s)
        smaller = pool.replicas - 1
        demand = self.prefill_demand(pool)
        fits = smaller >= 1 and (
            demand == 0
            or demand / smaller
            <= self.params.headroom
            * min(self.params.max_utilization, 1 - self._service(pool) / budget)
        )
        calm = pool.ttft_s is None or pool.ttft_s <= self.params.headroom * budget
        return self._shrink_or_hold(
            PREFILL, pool, fits and calm, f"{smaller} would meet the TTFT budget", now_s
        )

    @staticmethod
    def _service(pool: PoolSignals) -> float:
        return pool.busy / pool.requests_per_s if pool.requests_per_s > 0 else 0.0

    # --- decode ---

    def decode_decision(self, pool: PoolSignals, now_s: float, colocated: bool) -> Decision:
        target = self.params.tpot_s
        # The figures were measured on the replicas taking traffic: each rule scales
        # those, and the replicas still starting count as capacity on its way.
        serving = pool.taking_traffic
        needed = pool.replicas
        reasons = []
        if pool.tpot_s is not None and pool.tpot_s > target:
            needed = proportional(serving, pool.tpot_s / target)
            reasons.append(f"TPOT {pool.tpot_s * 1e3:.1f} ms over {target * 1e3:.1f} ms")
        if pool.kv_usage > self.params.kv_target:
            needed = max(needed, serving + 1)
            reasons.append(f"KV usage {pool.kv_usage:.0%} over {self.params.kv_target:.0%}")
        if pool.waiting >= max(1, serving):
            # The batch the pool holds now, grown to take the queue too.
            demand = (pool.running + pool.waiting) / max(pool.running, 1.0)
            needed = max(needed, proportional(serving, demand))
            reasons.append(f"{pool.waiting:.0f} requests waiting for a batch slot")
        ttft_share = self.params.ttft_s * (1 if colocated else self.params.decode_ttft_share)
        # Decode's TTFT counts against decode only while decode is busy: an idle decode
        # engine's first token waits on the KV's arrival, which more decode cannot hasten.
        busy = pool.busy >= self.params.decode_busy * max(serving, 1)
        if pool.ttft_s is not None and pool.ttft_s > ttft_share and (busy or colocated):
            needed = max(needed, proportional(serving, pool.ttft_s / ttft_share))
            what = "TTFT" if colocated else "decode's TTFT"
            reasons.append(f"{what} {pool.ttft_s * 1e3:.0f} ms over {ttft_share * 1e3:.0f} ms")
        if reasons:
            return self.grow(DECODE, pool, needed, "; ".join(reasons), now_s)
        smaller = pool.replicas - 1
        scale = pool.replicas / smaller if smaller >= 1 else math.inf
        headroom = self.params.headroom
        fits = (
            smaller >= 1
            and pool.waiting == 0
            and (pool.tpot_s is None or pool.tpot_s * scale <= headroom * target)
            and pool.kv_usage * scale <= headroom * self.params.kv_target
        )
        if pool.ttft_s is not None:
            fits = fits and pool.ttft_s * scale <= headroom * ttft_share
        return self._shrink_or_hold(
            DECODE, pool, fits, f"{smaller} would meet the TPOT target", now_s
        )

    # --- shared ---

    def grow(
        self,
        name: str,
        pool: PoolSignals,
        needed: int,
        reason: str,
        now_s: float,
        at_most_double: bool = True,
    ) -> Decision:
        memory = self.memory.setdefault(name, PoolMemory())
        memory.shrink_ok_since_s = None
        if needed <= pool.replicas and pool.starting:
            # The replicas on their way cover it: the signal lags them.
            return Decision(pool.replicas, f"{pool.starting} starting: {reason}")
        # At most double per decision: the signals lag, and new replicas take a while.
        wanted = min(needed, pool.max_replicas)
        if at_most_double:
            wanted = min(wanted, 2 * max(pool.replicas, 1))
        if wanted <= pool.replicas:
            return Decision(pool.replicas, f"at max_replicas ({pool.max_replicas}): {reason}")
        # Since the last growth: a pool that just shrank grows again at once.
        if now_s - memory.last_growth_s < self.params.upscale_cooldown_s:
            return Decision(pool.replicas, f"cooling down: {reason}")
        return Decision(wanted, reason)

    def _shrink_or_hold(
        self, name: str, pool: PoolSignals, fits: bool, reason: str, now_s: float
    ) -> Decision:
        memory = self.memory.setdefault(name, PoolMemory())
        if pool.replicas < pool.min_replicas:
            return Decision(pool.min_replicas, f"below min_replicas ({pool.min_replicas})")
        if not fits or pool.replicas <= pool.min_replicas:
            memory.shrink_ok_since_s = None
            return Decision(pool.replicas, "within targets")
        if memory.shrink_ok_since_s is None:
            memory.shrink_ok_since_s = now_s
        delay = self.params.downscale_delay_s
        if now_s - memory.shrink_ok_since_s >= delay and now_s - memory.last_change_s >= delay:
            return Decision(pool.replicas - 1, f"{reason} for {delay:g} s")
        return Decision(pool.replicas, f"{reason}; waiting out the downscale delay")

    def prefill_floor(self, pool: PoolSignals) -> int:
        """Prefill replicas that keep up with the arrivals, latency aside."""
        demand = self.prefill_demand(pool)
        keep_up = math.ceil(demand / self.params.max_utilization) if demand else 0
        return min(pool.replicas, max(pool.min_replicas, keep_up))

    def decode_floor(self, pool: PoolSignals) -> int:
        """Decode replicas that would still meet the TPOT target (proportional model)."""
        if pool.tpot_s is None:
            return min(pool.replicas, max(pool.min_replicas, 1 if pool.running else 0))
        needed = math.ceil(pool.replicas * pool.tpot_s / self.params.tpot_s)
        return min(pool.replicas, max(pool.min_replicas, needed))

    def decode_over(self, pool: PoolSignals) -> float:
        """How far decode runs over its targets: its largest signal over its target (TPOT,
        KV usage, its share of TTFT, and the batch it would hold with its queue)."""
        share = self.params.decode_ttft_share * self.params.ttft_s
        over = [pool.kv_usage / self.params.kv_target, (pool.ttft_s or 0.0) / share]
        if pool.tpot_s is not None:
            over.append(pool.tpot_s / self.params.tpot_s)
        if pool.waiting >= max(1, pool.taking_traffic):
            over.append((pool.running + pool.waiting) / max(pool.running, 1.0))
        return max(over)

    def prefill_over(self, pool: PoolSignals, decode: PoolSignals) -> float:
        """How far prefill's TTFT runs over its budget."""
        return (pool.ttft_s or 0.0) / self.ttft_budget_s(decode)


def proportional(replicas: int, over: float) -> int:
    """Replicas for a signal ``over`` times its target: scaled by it, at least one more."""
    return max(replicas + 1, math.ceil(replicas * over))
