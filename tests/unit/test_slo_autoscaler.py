"""The SLO policy inside Serve's application-level policy interface
(deployments.slo_autoscaler), on contexts shaped as Serve's AutoscalingContext."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from deployments.slo_autoscaler import SloAutoscaler, ingress_demand, pool_signals


def context(name: str, target: int, metrics: dict[str, dict[str, float]], running=None):
    replicas = running if running is not None else sorted({r for m in metrics.values() for r in m})
    return SimpleNamespace(
        deployment_name=name,
        app_name="splitserve",
        target_num_replicas=target,
        running_replicas=replicas,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=3,
        aggregated_metrics=metrics,
    )


def test_pool_signals_sum_rates_and_take_the_worst_measured_percentile():
    ctx = context(
        "Prefill",
        2,
        {
            "requests_per_s": {"a": 2.0, "b": 0.0, "gone": 9.0},
            "busy": {"a": 0.5, "b": 0.1, "gone": 1.0},
            # b measured nothing: its 0 is not a percentile
            "ttft_s": {"a": 0.4, "b": 0.0, "gone": 5.0},
            "kv_usage": {"a": 0.2, "b": 0.3},
            "arrived_prompt_tokens_per_s": {"a": 900.0, "b": 100.0, "gone": 50.0},
            "prompt_tokens_per_s": {"a": 400.0, "b": 100.0},
        },
        running=["a", "b"],
    )
    signals = pool_signals(ctx)
    assert (signals.arrived_tokens_per_s, signals.prefilled_tokens_per_s) == (1000.0, 500.0)
    assert (signals.replicas, signals.max_replicas) == (2, 3)
    assert signals.requests_per_s == 2.0 and signals.busy == 0.6
    assert signals.ttft_s == 0.4 and signals.tpot_s is None
    assert signals.kv_usage == 0.3
    assert (signals.taking_traffic, signals.starting) == (2, 0)
    # A third replica asked for is not running yet: it counts as starting.
    ctx.target_num_replicas = 3
    assert (pool_signals(ctx).taking_traffic, pool_signals(ctx).starting) == (2, 1)


def test_the_autoscaler_grows_the_pool_over_its_target_and_leaves_others():
    autoscaler = SloAutoscaler(slo={"ttft_ms": 1000, "tpot_ms": 50}, upscale_cooldown_s=0)
    contexts = {
        "P": context(
            "Prefill", 1, {"requests_per_s": {"p": 1.0}, "busy": {"p": 0.2}, "ttft_s": {"p": 0.1}}
        ),
        "D": context(
            "Decode",
            1,
            {"tokens_per_s": {"d": 100.0}, "tpot_s": {"d": 0.09}, "running": {"d": 8.0}},
        ),
        "I": context("Ingress", 1, {}),
    }
    decisions, state = autoscaler(contexts)
    assert decisions == {"P": 1, "D": 2, "I": 1}
    assert set(state) == {"P", "D", "I"}


def test_ingress_demand_sums_each_rate_over_running_replicas():
    ctx = context(
        "Ingress",
        2,
        {
            "arrivals_per_s": {"a": 10.0, "b": 6.0, "gone": 50.0},
            "remote_completed_per_s": {"a": 4.0, "b": 2.0, "gone": 50.0},
            "remote_prompt_tokens_per_s": {"a": 4000.0, "b": 4000.0},
            "remote_output_tokens_per_s": {"a": 40.0, "b": 80.0},
            "local_completed_per_s": {"a": 4.0, "b": 0.0},
            "local_prompt_tokens_per_s": {"a": 400.0, "b": 0.0},
            "local_output_tokens_per_s": {"a": 800.0, "b": 0.0},
        },
        running=["a", "b"],
    )
    demand = ingress_demand(ctx)
    assert demand is not None
    assert demand.requests_per_s == 16.0
    assert demand.remote_share == 0.6  # 6 of 10 completions per second
    assert (demand.remote_prompt_tokens, demand.remote_output_tokens) == (8000 / 6, 120 / 6)
    assert (demand.local_prompt_tokens, demand.local_output_tokens) == (100.0, 200.0)
    assert ingress_demand(context("Ingress", 1, {"arrivals_per_s": {"a": 3.0}})) is None


PROFILE = {"prefill": [[0, 0.0], [1000, 0.1]], "decode": [[1, 0.01], [64, 0.02]]}


def test_the_model_is_read_from_its_files_and_a_missing_one_is_named(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    autoscaler = SloAutoscaler(slo={"ttft_ms": 500}, model={"profile": str(path)})
    assert autoscaler.model is not None
    assert autoscaler.model.model.profile.prefill_s(500) == 0.05  # type: ignore[attr-defined]
    with pytest.raises(FileNotFoundError, match=r"policy_kwargs.model.profile: no file nowhere"):
        SloAutoscaler(model={"profile": "nowhere.json"})
    with pytest.raises(ValidationError, match="cores"):
        SloAutoscaler(model={"profile": str(path), "cores": -1})


def test_the_autoscaler_follows_the_models_split_for_the_ingress_demand(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    autoscaler = SloAutoscaler(
        slo={"ttft_ms": 500, "tpot_ms": 30},
        model={"profile": str(path), "duration_s": 30},
        upscale_cooldown_s=0,
    )
    # The pools look idle (their figures lag); 12 req/s of 2,000-token prompts with 4
    # output tokens arrive at the ingress: 2.4 prefill engines of work.
    contexts = {
        "P": context("Prefill", 1, {"requests_per_s": {"p": 0.0}}),
        "D": context("Decode", 1, {"requests_per_s": {"d": 0.0}}),
        "I": context(
            "Ingress",
            1,
            {
                "arrivals_per_s": {"i": 12.0},
                "remote_completed_per_s": {"i": 12.0},
                "remote_prompt_tokens_per_s": {"i": 24000.0},
                "remote_output_tokens_per_s": {"i": 48.0},
            },
        ),
    }
    for context_ in contexts.values():
        context_.capacity_adjusted_max_replicas = 4
    decisions, _ = autoscaler(contexts)
    assert decisions["P"] == 1  # the search runs off the control loop: no answer yet
    deadline = time.monotonic() + 60
    while autoscaler.model._future is not None and time.monotonic() < deadline:  # type: ignore[union-attr]
        autoscaler.model._future.result(timeout=60)  # type: ignore[union-attr]
        decisions, _ = autoscaler(contexts)
    assert decisions["P"] >= 3 and decisions["D"] == 1 and decisions["I"] == 1
