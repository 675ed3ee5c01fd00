"""What an operator sees, on the running app: engine series per pool in Ray's export and on
``/metrics``, every series the Grafana dashboard reads, and a real Prometheus scrape.

Ray's metrics agents export every 10 s (``metrics_report_interval_ms``), so each check
polls until the series it needs appear.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.net import free_port
from deployments.metrics_export import agent_addresses
from deployments.observe import prometheus_command, write_config
from tests.dashboard_names import EXPORTED_ON_EVENT, metric_names
from tests.integration.helpers import GREEDY, complete, random_prompt

EXPORT_WAIT_S = 60


def _remote_requests(apps: Any, http: Any, seed: int, count: int = 2) -> None:
    """Requests long enough to be prefilled remotely, so both pools and a transfer work.
    With logprobs, so that decode samples the first token: the hand-off and decode's
    first step are then stages of TTFT (after a first token from prefill they are not)."""
    for n in range(count):
        body = {**GREEDY, "prompt": random_prompt(seed + n, 200), "logprobs": 1}
        answer = complete(http, apps.disaggregated, body)
        assert answer["usage"]["completion_tokens"] == GREEDY["max_tokens"]


def _poll(read: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    deadline = time.monotonic() + EXPORT_WAIT_S
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {EXPORT_WAIT_S} s; last read: {value}")
        time.sleep(2)


def _samples(page: str) -> list[Any]:
    """Every sample of a Prometheus text page (parsing it proves the page is valid)."""
    return [s for family in text_string_to_metric_families(page) for s in family.samples]


def _value(samples: list[Any], name: str, **labels: str) -> float:
    return sum(
        float(s.value)
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_on_the_api_port_carry_each_pools_engine_series(apps, http):
    before = _samples(http.get(f"{apps.disaggregated}/metrics").text)
    prompt_before = _value(before, "vllm:prompt_tokens_total", pool="prefill")
    _remote_requests(apps, http, seed=9100)

    def read() -> list[Any]:
        response = http.get(f"{apps.disaggregated}/metrics")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        return _samples(response.text)

    samples = _poll(
        read,
        lambda s: _value(s, "vllm:prompt_tokens_total", pool="prefill") >= prompt_before + 400,
        "the prefill pool's prompt tokens on /metrics",
    )
    running = [s for s in samples if s.name == "vllm:num_requests_running"]
    assert {s.labels["pool"] for s in running} == {"prefill", "decode"}
    assert all(s.labels["replica"] for s in running)
    assert not [s for s in samples if "ReplicaId" in s.labels or "SessionName" in s.labels]
    for pool in ("prefill", "decode"):
        assert _value(samples, "splitserve_engine_busy_seconds_total", pool=pool) > 0
        assert any(
            s.name == "vllm:kv_cache_usage_perc" and s.labels["pool"] == pool for s in samples
        )
    # The app's own series: the transfer moved bytes, TTFT was recorded by stage.
    assert _value(samples, "splitserve_kv_transfer_bytes_total", transport="nixl") > 0
    stages = {s.labels["stage"] for s in samples if s.name == "splitserve_ttft_stage_seconds_count"}
    assert {"prefill", "kv_transfer", "first_decode_step"} <= stages
    # vLLM's NIXL connector series come from the decode engine, which reads the KV.
    assert _value(samples, "vllm:nixl_bytes_transferred_count", pool="decode") > 0


def _ray_export_names() -> set[str]:
    names = set()
    for target in agent_addresses():
        text = httpx.get(f"http://{target}/metrics", timeout=10).text
        names |= {s.name for s in _samples(text)}
    return names


def test_every_series_the_dashboard_reads_is_exported(apps, http):
    _remote_requests(apps, http, seed=9200)
    wanted = metric_names() - EXPORTED_ON_EVENT.keys()

    def missing() -> list[str]:
        return sorted(wanted - _ray_export_names())

    # Past Ray's gauge lifetime (2 export intervals): idle engines' gauges must stay.
    time.sleep(25)
    _poll(missing, lambda names: not names, "every dashboard series in Ray's export")


def _query(base: str, expr: str) -> list[Any]:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", answer
    result: list[Any] = answer["data"]["result"]
    return result


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary")
def test_prometheus_scrapes_ray_and_the_api_port(apps, http, tmp_path):
    import ray

    session = Path(ray._private.worker._global_node.get_session_dir_path())  # type: ignore[attr-defined]
    sd_file = session / "prom_metrics_service_discovery.json"
    _poll(sd_file.exists, bool, f"Ray's service discovery file {sd_file}")
    assert json.loads(sd_file.read_text())[0]["targets"]
    api = urlsplit(apps.disaggregated).netloc
    listen = f"127.0.0.1:{free_port('127.0.0.1')}"
    config = write_config(tmp_path, str(sd_file), api, interval_s=1)
    command = prometheus_command(config, tmp_path / "data", listen)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://{listen}"
        _poll(lambda: _ready(base), bool, "Prometheus ready")
        _remote_requests(apps, http, seed=9300, count=3)
        ttft = _poll(
            lambda: _query(
                base, "histogram_quantile(0.5, sum by (le) (ray_splitserve_ttft_seconds_bucket))"
            ),
            lambda r: bool(r) and r[0]["value"][1] not in ("NaN", "0"),
            "TTFT p50 from Prometheus",
        )
        assert 0 < float(ttft[0]["value"][1]) < 60
        for expr in (
            'sum(ray_splitserve_kv_transfer_bytes_total{job="ray"})',
            'sum(splitserve_kv_transfer_bytes_total{job="splitserve"})',
            'sum(vllm:num_requests_running{job="splitserve",pool="decode"}) + 1',
        ):
            result = _poll(partial(_query, base, expr), bool, expr)
            assert float(result[0]["value"][1]) > 0, expr
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
