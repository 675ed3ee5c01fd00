"""The SLO policy inside Serve's application-level policy interface
(deployments.slo_autoscaler), on contexts shaped as Serve's AutoscalingContext."""

from __future__ import annotations

from types import SimpleNamespace

from deployments.slo_autoscaler import SloAutoscaler, pool_signals


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
