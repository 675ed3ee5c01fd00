"""The GPU branch of each choice the GPU check and the KV transfer benchmark make (CI has
no GPU; ``make gpu-check`` runs them on one)."""

import pytest

from app.config import AppConfig
from load_tests.kv.gpu_check import CONFIGS, app_overrides, main
from load_tests.kv.kv_transfer_bench import Placement
from load_tests.systems.local_app import config_args, merge


def test_gpu_buffers_are_vram_over_cuda_transports_and_each_side_asks_for_a_gpu():
    one, two = Placement("cuda", gpus=1), Placement("cuda", gpus=2)
    assert one.memory == "VRAM" and "cuda_ipc" in one.ucx_tls and "cuda_copy" in one.ucx_tls
    assert one.actor_options() == {"num_cpus": 1, "num_gpus": 0.5}  # two sides, one GPU
    assert two.actor_options() == {"num_cpus": 1, "num_gpus": 1}


def test_host_buffers_are_dram_over_shared_memory_with_no_gpu():
    host = Placement("cpu")
    assert host.memory == "DRAM" and host.ucx_tls == "sm,self"
    assert host.actor_options() == {"num_cpus": 1}


def test_a_gpu_placement_without_a_gpu_or_an_unknown_device_is_refused():
    with pytest.raises(ValueError, match="needs a GPU"):
        Placement("cuda", gpus=0)
    with pytest.raises(ValueError, match="cpu or cuda"):
        Placement("tpu")


@pytest.mark.parametrize(("gpus", "share"), [(1, 0.5), (2, 1)])
def test_the_gpu_config_with_the_checks_changes_is_a_valid_app_config(gpus, share):
    args = merge(config_args(CONFIGS["cuda"]), app_overrides("cuda", gpus))
    config = AppConfig.model_validate(args)
    assert config.model.source == "builtin:tiny-llama"
    for pool in (config.prefill, config.decode):
        assert pool.ray_actor_options.num_gpus == share
    # Two engines on one GPU must leave each other room.
    assert config.model.gpu_memory_utilization <= (0.45 if gpus == 1 else 0.9)


def test_the_cpu_config_with_the_checks_changes_is_a_valid_app_config():
    config = AppConfig.model_validate(merge(config_args(CONFIGS["cpu"]), app_overrides("cpu", 0)))
    assert config.model.source == "builtin:tiny-llama"


def test_a_host_without_a_gpu_is_told_so_and_nothing_is_checked(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("load_tests.kv.gpu_check.gpu_count", lambda: 0)
    monkeypatch.setattr("sys.argv", ["gpu_check", "--out-dir", str(tmp_path)])
    assert main() == 2
    assert "shows no GPU" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())
