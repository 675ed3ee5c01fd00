"""`make run` refuses at once, before Ray starts, what the ingress would refuse at its
start: the API open to other hosts with no key, an invalid config."""

from pathlib import Path

import pytest
import yaml

from deployments.serve_run import main, preflight

CONFIGS = sorted((Path(__file__).parents[2] / "serve_configs").glob("*.yaml"))


def _file(tmp_path: Path, host: str | None, ingress: dict[str, object] | None = None) -> str:
    document = yaml.safe_load((CONFIGS[0].parent / "colocated.yaml").read_text())
    if host is None:
        document.pop("http_options", None)
    else:
        document["http_options"]["host"] = host
    document["applications"][0]["args"]["ingress"] = ingress or {}
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_the_shipped_configs_pass(path, monkeypatch):
    args = yaml.safe_load(path.read_text())["applications"][0]["args"]
    if (args.get("ingress") or {}).get("api_key_file"):
        # two_nodes.yaml's key file lives on the head; the key in the environment wins.
        monkeypatch.setenv("SPLITSERVE_API_KEY", "k" * 32)
    assert preflight(str(path)) is None


def test_an_open_address_without_a_key_is_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SPLITSERVE_API_KEY", raising=False)
    path = _file(tmp_path, "0.0.0.0")
    assert "no API key" in (preflight(path) or "")
    assert main([path]) == 2  # at once: no `serve run` child was started
    assert "served on 0.0.0.0" in capsys.readouterr().err
    monkeypatch.setenv("SPLITSERVE_API_KEY", "k" * 32)
    assert preflight(path) is None
    monkeypatch.delenv("SPLITSERVE_API_KEY")
    assert preflight(_file(tmp_path, "0.0.0.0", {"allow_network_without_key": True})) is None
    assert preflight(_file(tmp_path, None)) is None  # Serve's default host: 127.0.0.1


def test_an_invalid_config_is_named_and_a_foreign_file_left_to_serve(tmp_path):
    assert "max_waitin" in (preflight(_file(tmp_path, "127.0.0.1", {"max_waitin": 3})) or "")
    foreign = tmp_path / "other.yaml"
    foreign.write_text("applications: [{name: x, import_path: my.app:build}]")
    assert preflight(str(foreign)) is None
