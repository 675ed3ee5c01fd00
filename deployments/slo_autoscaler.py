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
(:mod:`app.scaling.autoscaling_stats`, averaged over the pool's ``look_back_period_s``), its
target and bounds. The decisions come from :class:`app.scaling.slo_policy.SloPolicy`. Every
change is logged by the controller with its reason and counted in
``splitserve_autoscaling_decisions`` (labels ``pool``, ``direction``, ``application``).
New replicas take traffic only once warm: an engine replica warms up in its constructor
(``app.engine.warmup``).

With ``model`` in ``policy_kwargs`` (:class:`app.config.PlannerModelConfig`) and an
``autoscaling_config`` on the ingress (so Serve hands the policy what the ingress
reports: :mod:`app.scaling.demand`), the policy also checks its decisions against the planner's
model of the arriving load (:mod:`app.scaling.split_model`). The model's search runs on a thread
of its own, off Serve's control loop; the policy uses its newest answer.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from app.config import PlannerModelConfig, SloConfig
from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEndCost
from app.planning.goodput import SLO
from app.planning.planner_split import PlannerSplitModel, ServingShape
from app.scaling.demand import Demand
from app.scaling.slo_policy import SloPolicy
from app.scaling.slo_signals import DECODE, PREFILL, Decision, PolicyParams, PoolSignals
from app.scaling.split_model import Split, SplitModel

logger = logging.getLogger("ray.serve")

POOLS = {"Prefill": PREFILL, "Decode": DECODE, "Colocated": DECODE}
INGRESS = "Ingress"


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
        serving=len(running),
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


def ingress_demand(context: Any) -> Demand | None:
    """The front door's :class:`Demand` from the ingress's ``AutoscalingContext``: each
    rate (:meth:`app.scaling.demand.DemandMeter.figures`) summed over its running replicas."""
    metrics: dict[str, dict[Any, float]] = context.aggregated_metrics or {}
    running = set(context.running_replicas)
    totals = {
        name: float(sum(v for r, v in per_replica.items() if r in running))
        for name, per_replica in metrics.items()
    }
    return Demand.from_figures(totals)


def planner_model(config: PlannerModelConfig, slo: SloConfig) -> PlannerSplitModel:
    """The planner's model for ``policy_kwargs.model`` (its files read now)."""
    frontend = FrontEndCost.from_fit(config.path("frontend")) if config.frontend else None
    shape = ServingShape(
        config.kv_bytes_per_token,
        config.link_gbps,
        config.local_prefill_below_tokens,
        frontend,
        config.cores,
    )
    return PlannerSplitModel(
        EngineProfile.load(config.path("profile")),
        SLO(slo.ttft_s, slo.tpot_s),
        slo.attainment,
        shape,
        duration_s=config.duration_s,
    )


class BackgroundSplit:
    """A :class:`SplitModel`'s answers worked out on a thread of their own:
    :meth:`latest` starts a search for the demand given (at most once per
    ``interval_s``, one at a time) and returns the newest answer so far. Each new
    answer is logged with the demand it is for and how long the search took."""

    def __init__(self, model: SplitModel, interval_s: float = 1.0) -> None:
        self.model = model
        self.interval_s = interval_s
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="splitserve-model")
        self._future: Future[tuple[Split, Demand, float]] | None = None
        self._asked_s = -float("inf")
        self._latest: Split | None = None

    def latest(
        self, demand: Demand, most: int, current: tuple[int, int], now_s: float
    ) -> Split | None:
        if self._future is not None and self._future.done():
            try:
                self._took(*self._future.result())
            except Exception:
                logger.exception("SLO autoscaler: the planner's model failed")
            self._future = None
        if self._future is None and now_s - self._asked_s >= self.interval_s:
            self._asked_s = now_s
            self._future = self._executor.submit(self._search, demand, most, current)
        return self._latest

    def _search(
        self, demand: Demand, most: int, current: tuple[int, int]
    ) -> tuple[Split, Demand, float]:
        started = time.monotonic()
        split = self.model.split(demand, most, current)
        return split, demand, time.monotonic() - started

    def _took(self, split: Split, demand: Demand, seconds: float) -> None:
        before = self._latest
        self._latest = split
        if before is not None and (before.name, before.meets) == (split.name, split.meets):
            return
        logger.info(
            "SLO autoscaler: the model: %.1f req/s arriving (%.0f%% remote, %.0f/%.0f "
            "tokens in/out; local %.0f/%.0f) need %s, predicted attainment %.0f%%%s "
            "(searched in %.2f s)",
            demand.requests_per_s,
            100 * demand.remote_share,
            demand.remote_prompt_tokens,
            demand.remote_output_tokens,
            demand.local_prompt_tokens,
            demand.local_output_tokens,
            split.name,
            100 * split.attainment,
            "" if split.meets else ", short of the target at any size",
            seconds,
        )


class SloAutoscaler:
    """Serve's application-level policy callable (Serve builds it with ``policy_kwargs``).

    ``slo`` is the application's ``slo:`` block (a YAML anchor keeps them one);
    ``model``, the planner's model to check decisions against
    (:class:`app.config.PlannerModelConfig`); the other arguments are
    :class:`app.scaling.slo_signals.PolicyParams`' tuning fields.
    """

    def __init__(
        self,
        slo: dict[str, Any] | None = None,
        model: dict[str, Any] | None = None,
        **tuning: Any,
    ) -> None:
        targets = SloConfig.model_validate(slo or {})
        self.policy = SloPolicy(
            PolicyParams(ttft_s=targets.ttft_s, tpot_s=targets.tpot_s, **tuning)
        )
        self.model: BackgroundSplit | None = None
        if model is not None:
            self.model = BackgroundSplit(
                planner_model(PlannerModelConfig.model_validate(model), targets)
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
        now = time.monotonic()
        split = self._split(contexts, signals, now)
        decisions = self.policy.decide(signals.get(PREFILL), signals[DECODE], now, split)
        result = {d: c.target_num_replicas for d, c in contexts.items()}
        for pool, decision in decisions.items():
            deployment_id, context = by_pool[pool]
            result[deployment_id] = decision.replicas
            self._report(context, signals[pool], decision)
        return result, {d: {} for d in contexts}

    def _split(
        self, contexts: dict[Any, Any], signals: dict[str, PoolSignals], now: float
    ) -> Split | None:
        """The model's newest split for the ingress's demand (disaggregated only)."""
        ingress = [c for c in contexts.values() if c.deployment_name == INGRESS]
        if self.model is None or PREFILL not in signals or not ingress:
            return None
        demand = ingress_demand(ingress[0])
        if demand is None:
            return None
        cap = self.policy.params.max_total_replicas
        most = cap or signals[PREFILL].max_replicas + signals[DECODE].max_replicas
        current = (signals[PREFILL].replicas, signals[DECODE].replicas)
        return self.model.latest(demand, most, current, now)

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
