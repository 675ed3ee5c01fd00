"""Readiness from the pools: a whole prefill pool lost later degrades the app, and its
requests are prefilled on decode at once (not after the prefill queue's timeout); the
app reports ready again once the pool's new replica serves."""

import time

import pytest

from tests.integration.faults import kill_replica, wait_healthy, wait_processes_gone, wait_until
from tests.integration.helpers import GREEDY, complete, random_prompt


def _health(http, base):
    answer = http.get(f"{base}/health")
    return answer.status_code, answer.json()


def test_health_says_every_pool_serves(apps, http):
    for base in (apps.disaggregated, apps.proxy):
        status, body = _health(http, base)
        assert status == 200 and body["status"] == "ok", body
        assert body["pools"] == {"prefill": "serving", "decode": "serving"}


@pytest.mark.kills_replica
def test_a_lost_prefill_pool_degrades_and_prompts_are_prefilled_on_decode_at_once(apps, http):
    prompt = random_prompt(7101, 300)  # remote by length (>= 64 in the tests' config)
    reference = complete(http, apps.colocated, {**GREEDY, "prompt": prompt})
    pids = kill_replica("Prefill")
    try:
        wait_until(
            lambda: _health(http, apps.disaggregated)[1]["status"] == "degraded",
            30,
            "/health to say the prefill pool is degraded",
        )
        status, body = _health(http, apps.disaggregated)
        assert status == 200 and body["degraded"] == ["prefill"], body  # decode still serves
        started = time.monotonic()
        answer = complete(http, apps.disaggregated, {**GREEDY, "prompt": prompt})
        took = time.monotonic() - started
        report = answer["splitserve"]
        assert report["decision"] == "prefill_unavailable", report
        assert report["fallbacks"] == [] and report["kv_transport"] == "local", report
        # At once: no wait for prefill_queue_timeout_s (10 s) before recomputing.
        assert took < 5, took
        assert answer["choices"][0]["text"] == reference["choices"][0]["text"]
    finally:
        wait_processes_gone(pids)
        wait_healthy("Prefill")
    wait_until(
        lambda: _health(http, apps.disaggregated)[1]["status"] == "ok",
        30,
        "/health to say every pool serves again",
    )
