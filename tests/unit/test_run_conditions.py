from pathlib import Path

from load_tests.systems.run_conditions import app_settings, machine

CONFIGS = Path(__file__).parents[2] / "serve_configs"


def test_machine_names_the_stack():
    info = machine()
    assert info["cpus"] >= 1
    assert "ray" in info["packages"]


def test_app_settings_record_pools_cores_and_caching():
    settings = app_settings(CONFIGS / "default.yaml")
    assert settings["mode"] == "disaggregated"
    assert settings["pools"]["prefill"]["cpu_binding"] == "0"
    assert settings["pools"]["decode"]["cpu_binding"] == "1"
    assert settings["pools"]["decode"]["replicas"] == 1
    assert settings["prefix_caching"] is True
    colocated = app_settings(CONFIGS / "colocated.yaml")
    assert set(colocated["pools"]) == {"decode"}
