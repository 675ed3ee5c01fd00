"""The SLO autoscaling policy as a Serve application-level policy.

A config file names it beside its ``args`` (``serve_configs/autoscaling.yaml``)::

    applications:
      - name: splitserve
        import_path: deployments.builder:build_app
        args:
          slo: &slo {ttft_ms: 2000, tpot_ms: 50}
          prefill: {autoscaling_config: {min_replicas: 1, max_replicas: 4}}
          decode: {autoscaling_config: {min_replicas: 1, max_replicas: 4}}
        autoscaling_policy:
          policy_function: deployments.slo_autoscaler:SloAutoscaler
          policy_kwargs: {slo: *slo}

Serve's controller builds one :class:`SloAutoscaler` and calls it every control-loop tick
with each autoscaled pool's context: the figures its replicas reported
(:mod:`app.autoscaling_stats`, averaged over the pool's ``look_back_period_s``), its
target and bounds. The decisions come from :class:`app.slo_policy.SloPolicy`. Every
change is logged by the controller with its reason and counted in
``splitserve_autoscaling_decisions`` (labels ``pool``, ``direction``, ``application``).
New replicas take traffic only once warm: an engine replica warms up in its constructor
(``app.warmup``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from app.config import SloConfig
from app.slo_policy import DECODE, PREFILL, Decision, PolicyParams, PoolSignals, SloPolicy

logger = logging.getLogger("ray.serve")

POOLS = {"Prefill": PREFILL, "Decode": DECODE, "Colocated": DECODE}


def pool_signals(context: Any) -> PoolSignals:
    """A pool's :class:`PoolSignals` from Serve's ``AutoscalingContext``."""
    metrics: dict[str, dict[Any, float]] = context.aggregated_metrics or {}
    running = set(context.running_replicas)

    def values(name: str) -> list[float]:
        return [v for replica, v in metrics.get(name, {}).items() if replica in running]

    def total(name: str) -> float:
        return float(sum(values(name)))

    def worst(name: str, when: str) -> float | None:
        # A percentile counts only from replicas that measured something.
        per_replica = metrics.get(name, {})
        measured = metrics.get(when, {})
        found = [v for r, v in per_replica.items() if r in running and measured.get(r, 0) > 0]
        return max(found) if found else None

    return PoolSignals(
        replicas=int(context.target_num_replicas),
        min_replicas=int(context.capacity_adjusted_min_replicas),
        max_replicas=int(context.capacity_adjusted_max_replicas),
        requests_per_s=total("requests_per_s"),
        busy=total("busy"),
        arrived_tokens_per_s=total("arrived_prompt_tokens_per_s"),
        prefilled_tokens_per_s=total("prompt_tokens_per_s"),
        ttft_s=worst("ttft_s", "requests_per_s"),
        tpot_s=worst("tpot_s", "tokens_per_s"),
        running=total("running"),
        waiting=total("waiting"),
        kv_usage=max(values("kv_usage"), default=0.0),
    )


class SloAutoscaler:
    """Serve's application-level policy callable (Serve builds it with ``policy_kwargs``).

    ``slo`` is the application's ``slo:`` block (a YAML anchor keeps them one); the other
    arguments are :class:`app.slo_policy.PolicyParams`' tuning fields.
    """

    def __init__(self, slo: dict[str, Any] | None = None, **tuning: Any) -> None:
        targets = SloConfig.model_validate(slo or {})
        self.policy = SloPolicy(
            PolicyParams(ttft_s=targets.ttft_s, tpot_s=targets.tpot_s, **tuning)
        )
        self._counter: Any = None

    def __call__(
        self, contexts: dict[Any, Any]
    ) -> tuple[dict[Any, int], dict[Any, dict[str, Any]]]:
        by_pool = {
            POOLS[c.deployment_name]: (d, c)
            for d, c in contexts.items()
            if c.deployment_name in POOLS
        }
        if DECODE not in by_pool:
            # Nothing this policy sizes: keep every target as it is.
            return {d: c.target_num_replicas for d, c in contexts.items()}, {
                d: {} for d in contexts
            }
        signals = {pool: pool_signals(context) for pool, (_, context) in by_pool.items()}
        decisions = self.policy.decide(signals.get(PREFILL), signals[DECODE], time.monotonic())
        result = {d: c.target_num_replicas for d, c in contexts.items()}
        for pool, decision in decisions.items():
            deployment_id, context = by_pool[pool]
            result[deployment_id] = decision.replicas
            self._report(context, signals[pool], decision)
        return result, {d: {} for d in contexts}

    def _report(self, context: Any, signals: PoolSignals, decision: Decision) -> None:
        deployment = context.deployment_name
        direction = decision.direction(signals.replicas)
        if direction == "hold":
            return
        logger.info(
            "SLO autoscaler: %s %d -> %d replicas: %s (%s)",
            deployment,
            signals.replicas,
            decision.replicas,
            decision.reason,
            signals,
        )
        if self._counter is None:
            from ray.util import metrics

            self._counter = metrics.Counter(
                "splitserve_autoscaling_decisions",
                description="Replica-count changes the SLO autoscaling policy made, by pool "
                "and direction (the reason is in the controller's log).",
                tag_keys=("pool", "direction", "application"),
            )
        tags = {"pool": deployment, "direction": direction, "application": context.app_name}
        self._counter.inc(1, tags=tags)
