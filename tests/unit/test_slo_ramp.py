"""The ramp benchmark's pure parts (load_tests.planning.slo_ramp)."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from app.config import AppConfig, serve_file_args, serve_file_policy
from app.planning.scaling_sim import ramp_arrival_times
from load_tests.planning.slo_ramp import default_policy_config


def test_ramp_arrivals_follow_each_phases_rate():
    times = ramp_arrival_times(random.Random(0), [(100, 2.0), (100, 8.0), (100, 2.0)])
    per_phase = [sum(1 for t in times if lo <= t < lo + 100) for lo in (0, 100, 200)]
    assert times == sorted(times) and times[-1] < 300
    assert 150 < per_phase[0] < 250 and 650 < per_phase[1] < 950 and 150 < per_phase[2] < 250


def test_the_default_policy_run_keeps_the_pools_and_the_policys_delays(tmp_path):
    source = "serve_configs/autoscaling.yaml"
    out = default_policy_config(source, tmp_path / "default.yaml")
    assert serve_file_policy(out) is None
    kwargs = yaml.safe_load(Path(source).read_text())["applications"][0]["autoscaling_policy"][
        "policy_kwargs"
    ]
    config = AppConfig.model_validate(serve_file_args(out))
    for pool in (config.prefill, config.decode):
        scaling = pool.autoscaling_config
        assert scaling is not None
        assert (scaling.min_replicas, scaling.max_replicas) == (1, 2)
        assert scaling.upscale_delay_s == kwargs["upscale_cooldown_s"]
        assert scaling.downscale_delay_s == kwargs["downscale_delay_s"]
    assert config.slo == AppConfig.model_validate(serve_file_args(source)).slo
