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
from dataclasses import dataclass

from app.scaling.pool_rules import PoolMemory, PoolRules
from app.scaling.slo_signals import DECODE, PREFILL, Decision, PoolSignals
from app.scaling.split_model import Split


@dataclass
class SloPolicy(PoolRules):
    """Each pool's rules (:class:`PoolRules`), then the arbitration between the pools:
    the model's floor, the pools' ratio, and the cluster's cap."""

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
        decisions = {DECODE: self.decode_decision(decode, now_s, colocated=prefill is None)}
        if prefill is not None:
            decisions[PREFILL] = self.prefill_decision(prefill, decode, now_s)
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

    # --- between the pools ---

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
                checked[name] = self.grow(name, pool, floor, why, now_s, at_most_double=False)
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
        over = {PREFILL: self.prefill_over(prefill, decode), DECODE: self.decode_over(decode)}
        decode_first = over[DECODE] > 1 or over[PREFILL] <= 1
        first, second = (DECODE, PREFILL) if decode_first else (PREFILL, DECODE)
        floors = {PREFILL: self.prefill_floor(prefill), DECODE: self.decode_floor(decode)}
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
