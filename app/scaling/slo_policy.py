"""The SLO autoscaling policy's decisions, as pure logic (Serve's adapter:
``deployments.slo_autoscaler``; the figures each replica reports:
:mod:`app.scaling.autoscaling_stats`).

**Prefill** is sized against the TTFT budget: the TTFT target less what decode adds to
it (the KV's arrival and the first step, measured on decode). Each prefill engine is
treated as a single-server queue: with service time S per prompt (busy seconds per
prefill) and utilization u, a prompt spends about S / (1 - u) there, so meeting the
budget B needs u ≤ 1 - S / B, and the pool needs ceil(demand / (1 - S / B)) replicas.
The demand is the engine-seconds per second the *arriving* prompts need: the pool's busy
share, scaled by the prompt tokens arriving over those prefilled when prompts arrive
faster than the pool prefills them (busy alone is work served, which saturates at the
pool's size however far the load runs beyond it). A measured TTFT over the budget grows
the pool in proportion (at least one more).

**Decode** is sized against the TPOT target, with TPOT taken as proportional to the
batch per replica (conservative: the fixed per-step cost does not shrink with the
batch): n replicas at TPOT t need ceil(n · t / target). KV usage over ``kv_target`` or
requests waiting for a slot grow it by one.

**Replicas on their way.** The figures were measured on the replicas taking traffic;
those still starting count as capacity on its way: each latency rule scales the
replicas serving, and a pool grows only past its target.

**Hysteresis.** A pool grows as soon as a rule says so, at most once per
``upscale_cooldown_s``. It shrinks by one replica only after the smaller pool would
have met the targets with ``headroom`` to spare (predicted by the same models) for a
whole ``downscale_delay_s``. ``min_prefill_per_decode`` / ``max_prefill_per_decode``
keep the pools' ratio in a range the user sets, by growing the smaller side. At
``max_total_replicas`` a pool grows by a trade (the other gives back), which waits while
any replica is starting and needs the pool asking to miss by the headroom margin.

**The model's check.** Given the split that a model of the system says the arriving
load needs (:class:`app.scaling.split_model.Split`, for the front door's demand, refused
requests included), each pool is held at least at the model's count: it grows to it at
once (past the doubling bound, since the arrivals lead where the pools' own figures lag;
still after the cool-down), it does not shrink below it, and when the cluster's cap
makes the pools share, neither gives back below it. The model's answer is a floor: the
measured rules above still grow a pool it under-sizes. Every decision carries its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.scaling.slo_signals import DECODE, PREFILL, Decision, PolicyParams, PoolSignals
from app.scaling.split_model import Split


@dataclass
class PoolMemory:
    """What the policy remembers about a pool between ticks."""

    last_change_s: float = -math.inf
    last_growth_s: float = -math.inf
    shrink_ok_since_s: float | None = None


@dataclass
class SloPolicy:
    params: PolicyParams
    memory: dict[str, PoolMemory] = field(default_factory=dict)

    def decide(
        self,
        prefill: PoolSignals | None,
        decode: PoolSignals,
        now_s: float,
        split: Split | None = None,
    ) -> dict[str, Decision]:
        """The replica count for each pool present (``prefill`` is None in colocated
        mode: the one pool then answers for TTFT as well). ``split``: what the model
        says the arriving load needs (disaggregated only; None: no model)."""
        decisions = {DECODE: self._decode(decode, now_s, colocated=prefill is None)}
        if prefill is not None:
            decisions[PREFILL] = self._prefill(prefill, decode, now_s)
            if split is not None:
                decisions = self._follow_model(decisions, prefill, decode, split, now_s)
            decisions = self._keep_ratio(decisions, prefill, decode)
            decisions = self._fit_cluster(decisions, prefill, decode, split)
        for pool, decision in decisions.items():
            current = (prefill if pool == PREFILL else decode).replicas  # type: ignore[union-attr]
            memory = self.memory.setdefault(pool, PoolMemory())
            if decision.replicas != current:
                memory.last_change_s = now_s
                memory.shrink_ok_since_s = None
            if decision.replicas > current:
                memory.last_growth_s = now_s
        return decisions

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

    def _prefill(self, pool: PoolSignals, decode: PoolSignals, now_s: float) -> Decision:
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
            needed = max(needed, _proportional(pool.taking_traffic, over))
            reasons.append(
                f"prefill TTFT {pool.ttft_s * 1e3:.0f} ms over budget {budget * 1e3:.0f} ms"
            )
        if reasons:
            return self._grow(PREFILL, pool, needed, "; ".join(reasons), now_s)
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

    def _decode(self, pool: PoolSignals, now_s: float, colocated: bool) -> Decision:
        target = self.params.tpot_s
        # The figures were measured on the replicas taking traffic: each rule scales
        # those, and the replicas still starting count as capacity on its way.
        serving = pool.taking_traffic
        needed = pool.replicas
        reasons = []
        if pool.tpot_s is not None and pool.tpot_s > target:
            needed = _proportional(serving, pool.tpot_s / target)
            reasons.append(f"TPOT {pool.tpot_s * 1e3:.1f} ms over {target * 1e3:.1f} ms")
        if pool.kv_usage > self.params.kv_target:
            needed = max(needed, serving + 1)
            reasons.append(f"KV usage {pool.kv_usage:.0%} over {self.params.kv_target:.0%}")
        if pool.waiting >= max(1, serving):
            # The batch the pool holds now, grown to take the queue too.
            demand = (pool.running + pool.waiting) / max(pool.running, 1.0)
            needed = max(needed, _proportional(serving, demand))
            reasons.append(f"{pool.waiting:.0f} requests waiting for a batch slot")
        ttft_share = self.params.ttft_s * (1 if colocated else self.params.decode_ttft_share)
        # Decode's TTFT counts against decode only while decode is busy: an idle decode
        # engine's first token waits on the KV's arrival, which more decode cannot hasten.
        busy = pool.busy >= self.params.decode_busy * max(serving, 1)
        if pool.ttft_s is not None and pool.ttft_s > ttft_share and (busy or colocated):
            needed = max(needed, _proportional(serving, pool.ttft_s / ttft_share))
            what = "TTFT" if colocated else "decode's TTFT"
            reasons.append(f"{what} {pool.ttft_s * 1e3:.0f} ms over {ttft_share * 1e3:.0f} ms")
        if reasons:
            return self._grow(DECODE, pool, needed, "; ".join(reasons), now_s)
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

    def _grow(
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

    def _follow_model(
        self,
        decisions: dict[str, Decision],
        prefill: PoolSignals,
        decode: PoolSignals,
        split: Split,
        now_s: float,
    ) -> dict[str, Decision]:
        """Each pool at least at the model's split: grown to it, or held at it."""
        checked = dict(decisions)
        why = f"the model: {split.requests_per_s:.1f} req/s arriving need {split.name}"
        if not split.meets:
            why = (
                f"the model: {split.requests_per_s:.1f} req/s arriving are more than any "
                f"split meets; {split.name} serves as many as any ({split.attainment:.0%})"
            )
        modelled = ((PREFILL, prefill, split.prefill), (DECODE, decode, split.decode))
        for name, pool, wanted in modelled:
            floor = max(pool.min_replicas, min(wanted, pool.max_replicas))
            decision = decisions[name]
            if decision.replicas >= floor:
                continue
            if floor <= pool.replicas:
                checked[name] = Decision(floor, f"held: {why} ({decision.reason})")
                self.memory.setdefault(name, PoolMemory()).shrink_ok_since_s = None
            else:
                checked[name] = self._grow(name, pool, floor, why, now_s, at_most_double=False)
        return checked

    def _keep_ratio(
        self, decisions: dict[str, Decision], prefill: PoolSignals, decode: PoolSignals
    ) -> dict[str, Decision]:
        p, d = decisions[PREFILL], decisions[DECODE]
        most = self.params.max_prefill_per_decode
        least = self.params.min_prefill_per_decode
        if most is not None and p.replicas > most * d.replicas:
            grown = min(decode.max_replicas, math.ceil(p.replicas / most))
            if grown > d.replicas:
                d = Decision(grown, f"prefill:decode at most {most:g}")
        if least is not None and p.replicas < least * d.replicas:
            grown = min(prefill.max_replicas, math.ceil(least * d.replicas))
            if grown > p.replicas:
                p = Decision(grown, f"prefill:decode at least {least:g}")
        return {PREFILL: p, DECODE: d}

    def _fit_cluster(
        self,
        decisions: dict[str, Decision],
        prefill: PoolSignals,
        decode: PoolSignals,
        split: Split | None = None,
    ) -> dict[str, Decision]:
        """Within ``max_total_replicas``: the pool that misses its own target gets what
        it asks for first (decode when both do: prefill's output waits on it); the other
        gives back replicas, at once, down to what keeps up with its load (its floor),
        and never below the model's split. No replica changes pools while either pool
        has one starting, or for a pool asking that misses by less than the headroom
        margin (:meth:`_trade_held`)."""
        cap = self.params.max_total_replicas
        if cap is None or decisions[PREFILL].replicas + decisions[DECODE].replicas <= cap:
            return decisions
        over = {PREFILL: self._prefill_over(prefill, decode), DECODE: self._decode_over(decode)}
        decode_first = over[DECODE] > 1 or over[PREFILL] <= 1
        first, second = (DECODE, PREFILL) if decode_first else (PREFILL, DECODE)
        floors = {PREFILL: self._prefill_floor(prefill), DECODE: self._decode_floor(decode)}
        if split is not None:
            modelled = {PREFILL: split.prefill, DECODE: split.decode}
            floors = {
                pool: max(floor, min(modelled[pool], decisions[pool].replicas))
                for pool, floor in floors.items()
            }
        pools = {PREFILL: prefill, DECODE: decode}
        wanted = decisions[first].replicas
        note = f"the cluster holds {cap}"
        held = self._trade_held(first, over[first], prefill, decode)
        if held:
            # The first pool gets only the room the second leaves of itself.
            floors[second] = min(decisions[second].replicas, pools[second].replicas)
            note += f"; {held}"
        granted = min(wanted, cap - floors[second])
        if held:
            granted = max(granted, min(wanted, pools[first].replicas))
        rest = max(floors[second], min(decisions[second].replicas, cap - granted))
        return {
            first: decisions[first]
            if granted == wanted
            else Decision(granted, f"{decisions[first].reason}; {note}"),
            second: decisions[second]
            if rest == decisions[second].replicas
            else Decision(rest, f"{first} needs room ({note})"),
        }

    def _trade_held(
        self, first: str, over: float, prefill: PoolSignals, decode: PoolSignals
    ) -> str | None:
        """Why no replica moves between the pools now (None: it may). A trade takes a
        serving replica from a pool that meets its targets, and the other pool has it a
        startup's time later, so it waits for any replica still starting (the figures
        have not seen it yet), and it needs the pool asking (``first``, ``over`` times
        its target) to miss by the ``headroom`` margin a shrink keeps."""
        starting = prefill.starting + decode.starting
        if starting:
            return f"trading waits for {starting} starting"
        if over < 1 / self.params.headroom:
            return f"{first} {over:.2f}x its target: a trade needs {1 / self.params.headroom:.2f}x"
        return None

    def _prefill_floor(self, pool: PoolSignals) -> int:
        """Prefill replicas that keep up with the arrivals, latency aside."""
        demand = self.prefill_demand(pool)
        keep_up = math.ceil(demand / self.params.max_utilization) if demand else 0
        return min(pool.replicas, max(pool.min_replicas, keep_up))

    def _decode_floor(self, pool: PoolSignals) -> int:
        """Decode replicas that would still meet the TPOT target (proportional model)."""
        if pool.tpot_s is None:
            return min(pool.replicas, max(pool.min_replicas, 1 if pool.running else 0))
        needed = math.ceil(pool.replicas * pool.tpot_s / self.params.tpot_s)
        return min(pool.replicas, max(pool.min_replicas, needed))

    def _decode_over(self, pool: PoolSignals) -> float:
        """How far decode runs over its targets: its largest signal over its target (TPOT,
        KV usage, its share of TTFT, and the batch it would hold with its queue)."""
        share = self.params.decode_ttft_share * self.params.ttft_s
        over = [pool.kv_usage / self.params.kv_target, (pool.ttft_s or 0.0) / share]
        if pool.tpot_s is not None:
            over.append(pool.tpot_s / self.params.tpot_s)
        if pool.waiting >= max(1, pool.taking_traffic):
            over.append((pool.running + pool.waiting) / max(pool.running, 1.0))
        return max(over)

    def _prefill_over(self, pool: PoolSignals, decode: PoolSignals) -> float:
        """How far prefill's TTFT runs over its budget."""
        return (pool.ttft_s or 0.0) / self.ttft_budget_s(decode)


def _proportional(replicas: int, over: float) -> int:
    """Replicas for a signal ``over`` times its target: scaled by it, at least one more."""
    return max(replicas + 1, math.ceil(replicas * over))
