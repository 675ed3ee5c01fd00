"""Serve's default autoscaling policy, per pool, for the scaling simulator.

Ray Serve's ``replica_queue_length_autoscaling_policy`` (Ray 2.60) wants
``total_num_requests / target_ongoing_requests`` replicas, where the total counts the
requests ongoing at the pool's replicas and queued for them; a change of direction must
persist for ``upscale_delay_s`` (or ``downscale_delay_s``) before it is applied, and the
count stays within the pool's bounds. Scaling factors are Serve's default (1). This
module mirrors that rule so that :func:`app.planning.scaling_sim.simulate_scaling` can
replay a ramp under it, beside :class:`app.scaling.slo_policy.SloPolicy`: the simulator hands it
the requests each pool holds at the tick (``PoolSignals.ongoing``), where Serve averages
replicas' reports over ``look_back_period_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.scaling.slo_signals import DECODE, PREFILL, Decision, PoolSignals
from app.scaling.split_model import Split


@dataclass
class OngoingRequestsPolicy:
    """Each pool sized to ``target_ongoing_requests`` per replica (Serve's default)."""

    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    # pool -> (direction "up" / "down", since when it has wanted that)
    _wanting: dict[str, tuple[str, float]] = field(default_factory=dict)

    def decide(
        self,
        prefill: PoolSignals | None,
        decode: PoolSignals,
        now_s: float,
        split: Split | None = None,  # Serve's default knows no model
    ) -> dict[str, Decision]:
        decisions = {DECODE: self._pool(DECODE, decode, now_s)}
        if prefill is not None:
            decisions[PREFILL] = self._pool(PREFILL, prefill, now_s)
        return decisions

    def _pool(self, name: str, pool: PoolSignals, now_s: float) -> Decision:
        wanted = math.ceil(pool.ongoing / self.target_ongoing_requests)
        wanted = min(pool.max_replicas, max(pool.min_replicas, wanted))
        reason = f"{pool.ongoing:g} ongoing for {self.target_ongoing_requests:g} per replica"
        if wanted == pool.replicas:
            self._wanting.pop(name, None)
            return Decision(pool.replicas, reason)
        direction = "up" if wanted > pool.replicas else "down"
        since = self._wanting.get(name)
        if since is None or since[0] != direction:
            self._wanting[name] = (direction, now_s)
            since = self._wanting[name]
        delay = self.upscale_delay_s if direction == "up" else self.downscale_delay_s
        if now_s - since[1] < delay:
            return Decision(pool.replicas, f"{reason}; waiting out the {direction}scale delay")
        self._wanting.pop(name, None)
        return Decision(wanted, reason)
