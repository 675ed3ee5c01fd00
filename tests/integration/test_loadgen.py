"""One short real run of the load generator against the default app."""

import random

from app.planning.goodput import SLO
from load_tests.client.loadgen import run_at_rate, summary
from load_tests.client.workloads import mixed


async def test_short_poisson_run_produces_a_complete_result(apps):
    requests = mixed(random.Random(3), 10, long_share=0.3)
    timings, failures, wall = await run_at_rate(
        apps.disaggregated, requests, rate=5.0, seed=3, progress=False
    )
    result = summary(timings, failures, wall, SLO(ttft_s=5.0, tpot_s=1.0))
    assert result["ok"] == 10 and result["failed"] == 0
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert result[metric]["n"] > 0 and 0 < result[metric]["p50"] <= result[metric]["p99"]
    assert result["slo_attainment"] > 0
    assert result["kv_bytes"] > 0 and "nixl" in result["kv_transports"]
