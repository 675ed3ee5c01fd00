"""The alerting rules shipped for Prometheus (observability/alerts.yml) parse, and each one
fires in its firing case and stays quiet in its other cases (`promtool test rules` on
observability/alerts_test.yml). `make test` puts promtool in the venv."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "observability" / "alerts.yml"
CASES = ROOT / "observability" / "alerts_test.yml"


def _promtool() -> str:
    local = ROOT / ".venv" / "bin" / "promtool"
    found = str(local) if local.exists() else shutil.which("promtool")
    if found is None:
        pytest.fail("no promtool: `make test` fetches it (scripts/fetch-promtool .venv/bin)")
    return found


def test_the_rules_parse():
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_every_rule_fires_and_stays_quiet_as_its_cases_say():
    done = subprocess.run(
        [_promtool(), "test", "rules", CASES.name], capture_output=True, cwd=CASES.parent
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_every_rule_has_a_firing_and_a_quiet_case():
    rules = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    evals = [
        e for case in yaml.safe_load(CASES.read_text())["tests"] for e in case["alert_rule_test"]
    ]
    for rule in rules:
        mine = [e["exp_alerts"] for e in evals if e["alertname"] == rule]
        assert any(mine), f"{rule} has no case in which it fires"
        assert any(not alerts for alerts in mine), f"{rule} has no case in which it is quiet"


def test_make_observe_loads_the_rules(tmp_path):
    from deployments.observe import prometheus_config

    config = prometheus_config("/tmp/sd.json", "127.0.0.1:8000", 5)
    assert config["rule_files"] == [str(RULES)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([_promtool(), "check", "config", str(path)], capture_output=True)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
