from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.config import AppConfig, Mode, serve_file_args, serve_file_policy

CONFIGS = sorted(Path(__file__).parents[2].joinpath("serve_configs").glob("*.yaml"))


# The GPU host configs: GPUs the app takes, and each engine's tensor parallel degree.
GPU_HOSTS = {"gpu_one.yaml": (1, 1), "gpu.yaml": (2, 1), "gpu_tp8.yaml": (8, 4)}


def _args(path: Path):
    return serve_file_args(path)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_validate(path):
    config = AppConfig.model_validate(_args(path))
    if path.name in GPU_HOSTS:  # a real model on GPUs: no core binding, KV in GPU memory
        gpus, tensor_parallel = GPU_HOSTS[path.name]
        pools = (config.prefill, config.decode)
        used = sum(p.ray_actor_options.num_gpus * (p.num_replicas or 1) for p in pools)
        assert used == gpus and config.model.tensor_parallel_size == tensor_parallel
        for pool in pools:  # each engine has as many GPUs as its tensor parallel degree
            assert pool.ray_actor_options.num_gpus in (tensor_parallel, 0.5)
            assert pool.cpu_binding is None
        if config.decode.ray_actor_options.num_gpus < 1:  # two engines share a card
            assert config.model.gpu_memory_utilization * 2 < 0.9
        # One host: the NIXL listener (no authentication) stays on loopback.
        assert config.transport.side_channel_host == "127.0.0.1"
        return
    assert config.model.name == "tiny-llama"


def test_default_config_pins_prefill_and_decode_to_separate_cores():
    config = AppConfig.model_validate(
        _args(CONFIGS[[p.name for p in CONFIGS].index("default.yaml")])
    )
    assert config.mode is Mode.DISAGGREGATED
    assert (config.prefill.cpu_binding, config.decode.cpu_binding) == ("0", "1")


def test_unknown_key_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as info:
        AppConfig.model_validate({"prefill": {"num_replica": 2}})
    assert "prefill.num_replica" in str(info.value).replace("\n  ", ".")


def test_bad_value_names_the_field():
    with pytest.raises(ValidationError) as info:
        AppConfig.model_validate({"model": {"max_model_len": 0}})
    assert "max_model_len" in str(info.value)


def test_num_replicas_and_autoscaling_are_exclusive():
    with pytest.raises(ValidationError, match="either num_replicas or autoscaling_config"):
        AppConfig.model_validate(
            {"decode": {"num_replicas": 2, "autoscaling_config": {"max_replicas": 3}}}
        )


def test_autoscaling_bounds_checked():
    with pytest.raises(ValidationError, match="min_replicas must be <= max_replicas"):
        AppConfig.model_validate({"decode": {"autoscaling_config": {"min_replicas": 3}}})


@pytest.mark.parametrize("binding", ["0", "1", "0-3", "0,2,4-5", "all", "nobind", "0|1", "0-1|2-3"])
def test_cpu_binding_accepts_vllm_forms(binding):
    assert AppConfig.model_validate({"prefill": {"cpu_binding": binding}})


@pytest.mark.parametrize("binding", ["core0", "0-", "", "1;2", "0|", "|1", "all|0"])
def test_cpu_binding_rejects_garbage(binding):
    with pytest.raises(ValidationError, match="cpu_binding"):
        AppConfig.model_validate({"prefill": {"cpu_binding": binding}})


def test_serve_options_follow_the_scaling_mode():
    fixed = AppConfig.model_validate({"decode": {"num_replicas": 2}}).decode.to_serve_options()
    assert fixed["num_replicas"] == 2 and "autoscaling_config" not in fixed
    scaled = AppConfig.model_validate(
        {"decode": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4}}}
    ).decode.to_serve_options()
    assert scaled["autoscaling_config"]["max_replicas"] == 4 and "num_replicas" not in scaled
    assert scaled["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.0, "resources": {}}


def test_served_name_defaults_from_source():
    assert AppConfig().model.name == "tiny-llama"
    assert AppConfig.model_validate({"model": {"source": "/m/llama"}}).model.name == "/m/llama"
    named = AppConfig.model_validate({"model": {"source": "/m/llama", "served_name": "llama"}})
    assert named.model.name == "llama"


def test_executor_runs_the_model_in_the_engine_core_unless_parallel():
    assert AppConfig().model.executor_backend == "uni"
    parallel = AppConfig.model_validate({"model": {"tensor_parallel_size": 2}})
    assert parallel.model.executor_backend is None  # vLLM's own choice
    chosen = AppConfig.model_validate({"model": {"executor": "mp"}})
    assert chosen.model.executor_backend == "mp"


def test_uni_executor_with_tensor_parallelism_is_refused():
    with pytest.raises(ValidationError, match=r"model\.executor 'uni'"):
        AppConfig.model_validate({"model": {"executor": "uni", "tensor_parallel_size": 2}})


def test_a_serve_file_that_is_not_one_splitserve_app_is_refused(tmp_path):
    two = tmp_path / "two.yaml"
    two.write_text("applications:\n- {import_path: deployments.builder:build_app}\n- {}\n")
    with pytest.raises(ValueError, match="exactly one application"):
        serve_file_args(two)
    other = tmp_path / "other.yaml"
    other.write_text("applications:\n- {import_path: somewhere:else, args: {}}\n")
    with pytest.raises(ValueError, match="import_path must be"):
        serve_file_args(other)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_are_valid_serve_config_files(path):
    """What `serve run` reads: the whole file, application-level policy included."""
    import yaml
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(yaml.safe_load(path.read_text()))


def test_the_autoscaling_config_gives_its_policy_the_apps_slo():
    from deployments.slo_autoscaler import SloAutoscaler

    path = CONFIGS[[p.name for p in CONFIGS].index("autoscaling.yaml")]
    policy = serve_file_policy(path)
    assert policy is not None
    assert policy["policy_function"] == "deployments.slo_autoscaler:SloAutoscaler"
    config = AppConfig.model_validate(_args(path))
    assert policy["policy_kwargs"]["slo"] == config.slo.model_dump()
    assert config.prefill.autoscaling_config and config.decode.autoscaling_config
    autoscaler = SloAutoscaler(**policy["policy_kwargs"])
    assert autoscaler.policy.params.ttft_s == config.slo.ttft_s
    # the planner's model it checks against: its files ship, its router threshold is
    # the app's, and the ingress reports the demand it reads
    assert autoscaler.model is not None
    model = policy["policy_kwargs"]["model"]
    assert model["local_prefill_below_tokens"] == config.router.local_prefill_below_tokens
    assert config.ingress.autoscaling_config is not None
    assert config.ingress.autoscaling_config.max_replicas == 1


def test_slo_attainment_cannot_exceed_its_percentile():
    with pytest.raises(ValidationError, match="cannot exceed the percentile"):
        AppConfig.model_validate({"slo": {"percentile": 90, "attainment": 0.95}})
    assert AppConfig.model_validate({"slo": {"percentile": 99, "attainment": 0.95}})


def test_slo_defaults():
    slo = AppConfig.model_validate({}).slo
    assert (slo.ttft_ms, slo.tpot_ms, slo.percentile, slo.attainment) == (5000, 100, 90, 0.9)


def test_load_tests_and_planner_read_the_slo_block(tmp_path):
    import argparse

    from app.planning.goodput import add_slo_options, slo_from_options

    path = CONFIGS[[p.name for p in CONFIGS].index("autoscaling.yaml")]
    parser = argparse.ArgumentParser()
    add_slo_options(parser, ttft_ms=200, tpot_ms=20)
    slo, target = slo_from_options(parser.parse_args(["--slo-config", str(path)]))
    config = AppConfig.model_validate(_args(path)).slo
    assert (slo.ttft_s, slo.tpot_s, target) == (config.ttft_s, config.tpot_s, config.attainment)
    # a flag overrides the file; without either, the tool's defaults
    slo, _ = slo_from_options(parser.parse_args(["--slo-config", str(path), "--slo-tpot-ms", "7"]))
    assert (slo.ttft_s, slo.tpot_s) == (config.ttft_s, 0.007)
    slo, target = slo_from_options(parser.parse_args([]))
    assert (slo.ttft_s, slo.tpot_s, target) == (0.2, 0.02, 0.9)


KEY = "s3cret-" + "k" * 16


def test_the_api_key_never_prints_and_a_short_one_is_refused():
    config = AppConfig.model_validate({"ingress": {"api_key": KEY}})
    assert KEY not in repr(config) and KEY not in str(config.ingress)
    assert config.ingress.keys(environ={}) == (KEY,)
    with pytest.raises(ValidationError, match="at least 16 characters"):
        AppConfig.model_validate({"ingress": {"api_key": "x"}})


def test_the_key_comes_from_the_environment_then_a_private_file_then_the_config(tmp_path):
    import os

    from app.config import IngressConfig

    path = tmp_path / "key"
    path.write_text("f" * 20 + "\n")
    os.chmod(path, 0o600)
    ingress = IngressConfig(api_key=KEY, api_key_file=str(path))
    assert ingress.keys(environ={}) == ("f" * 20,)
    assert ingress.keys(environ={"SPLITSERVE_API_KEY": "e" * 16}) == ("e" * 16,)
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="readable by others"):
        ingress.keys(environ={})


def test_several_keys_are_accepted_for_a_rotation_each_checked(tmp_path):
    import os

    from app.config import IngressConfig

    path = tmp_path / "keys"
    path.write_text("# the new key, then the old one\n" + "n" * 20 + "\n\n" + "o" * 20 + "\n")
    os.chmod(path, 0o600)
    ingress = IngressConfig(api_key_file=str(path))
    assert ingress.keys(environ={}) == ("n" * 20, "o" * 20)
    both = {"SPLITSERVE_API_KEY": "a" * 16 + "," + "b" * 16}
    assert ingress.keys(environ=both) == ("a" * 16, "b" * 16)
    with pytest.raises(ValueError, match="SPLITSERVE_API_KEY: an API key needs at least 16"):
        ingress.keys(environ={"SPLITSERVE_API_KEY": "a" * 16 + ",short"})
    path.write_text("# nothing but a comment\n")
    with pytest.raises(ValueError, match="holds no key"):
        ingress.keys(environ={})


def test_the_engine_replicas_are_built_without_the_key():
    from deployments.builder import build_app

    app: Any = build_app({"ingress": {"api_key": KEY}})
    ingress_config = app._bound_deployment.init_args[0]
    assert ingress_config.ingress.api_key.get_secret_value() == KEY
    for pool in app._bound_deployment.init_args[1:]:
        if pool is not None:
            assert pool._bound_deployment.init_args[1].ingress.api_key is None


def test_a_hub_model_without_a_revision_is_warned_about_and_one_with_it_is_passed_on():
    from app.config.model import ModelConfig, UnpinnedModel
    from app.engine.setup import engine_arguments
    from app.pool.records import Role

    with pytest.warns(UnpinnedModel, match="no model.revision"):
        ModelConfig(source="org/model")
    pinned = AppConfig.model_validate({"model": {"source": "org/model", "revision": "abc123"}})
    args = engine_arguments(Role.DECODE, pinned, "org/model", "e")
    assert args.revision == args.tokenizer_revision == "abc123"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ModelConfig(source="builtin:tiny-llama")  # generated locally: nothing to pin


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_a_config_that_serves_every_interface_asks_for_a_key(path):
    import yaml

    host = (yaml.safe_load(path.read_text()).get("http_options") or {}).get("host")
    ingress = AppConfig.model_validate(_args(path)).ingress
    if host not in ("127.0.0.1", "localhost", None):
        assert ingress.api_key_file is not None or ingress.api_key is not None, path.name


@pytest.mark.parametrize(
    ("host", "key", "allowed", "refused"),
    [
        ("127.0.0.1", None, False, False),
        ("::1", None, False, False),
        ("localhost", None, False, False),
        ("0.0.0.0", None, False, True),
        ("::", None, False, True),
        ("198.18.0.1", None, False, True),
        ("api.internal", None, False, True),  # a name may resolve to any address
        ("0.0.0.0", (KEY,), False, False),
        ("0.0.0.0", None, True, False),  # a firewall or a proxy of the operator's guards it
    ],
)
def test_the_api_is_not_served_to_the_network_without_a_key(host, key, allowed, refused):
    from app.config import IngressConfig

    ingress = IngressConfig(allow_network_without_key=allowed)
    key = key or ()
    if refused:
        with pytest.raises(ValueError, match=rf"served on {host} .*no API key.*127\.0\.0\.1"):
            ingress.check_exposure(host, key)
    else:
        ingress.check_exposure(host, key)


def test_a_missing_key_file_is_an_error_naming_it(tmp_path):
    from app.config import IngressConfig

    with pytest.raises(ValueError, match=r"api_key_file .*No such file"):
        IngressConfig(api_key_file=str(tmp_path / "none")).keys(environ={})


def test_colocated_two_runs_one_engine_per_core_as_the_default_app_does():
    by_name = {p.name: p for p in CONFIGS}
    two = AppConfig.model_validate(_args(by_name["colocated_two.yaml"]))
    default = AppConfig.model_validate(_args(by_name["default.yaml"]))
    assert two.mode is Mode.COLOCATED and two.decode.num_replicas == 2
    assert two.decode.cpu_binding is not None
    assert set(two.decode.cpu_binding.split("|")) == {
        default.prefill.cpu_binding,
        default.decode.cpu_binding,
    }
