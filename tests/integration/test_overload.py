"""A burst beyond the admission limit: refused at once with 503 + Retry-After, while every
admitted request completes; nothing else but 200 and 503, and no KV block held after."""

import asyncio

import httpx

from tests.integration.conftest import ADMISSION_MAX_WAITING, Apps
from tests.integration.faults import assert_no_kv_held
from tests.integration.helpers import GREEDY, random_prompt

BURST = 3 * ADMISSION_MAX_WAITING


async def test_a_burst_beyond_the_limit_is_shed_and_the_admitted_complete(apps: Apps):
    async def send(client: httpx.AsyncClient, seed: int) -> httpx.Response:
        body = {**GREEDY, "max_tokens": 4, "prompt": random_prompt(seed, 300)}
        return await client.post(f"{apps.disaggregated}/v1/completions", json=body)

    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        answers = await asyncio.gather(*(send(client, 12000 + i) for i in range(BURST)))
    statuses = [a.status_code for a in answers]
    assert set(statuses) <= {200, 503}, statuses
    shed = [a for a in answers if a.status_code == 503]
    served = [a for a in answers if a.status_code == 200]
    # The burst arrives at once: at most the limit waits for a first token, the rest is shed.
    assert len(shed) >= BURST - 2 * ADMISSION_MAX_WAITING, statuses
    assert len(served) >= ADMISSION_MAX_WAITING // 2, statuses
    for answer in shed:
        # The measured time for the queue waiting now to drain, in whole seconds.
        assert 1 <= int(answer.headers["retry-after"]) <= 60
        assert "overloaded" in answer.json()["error"]["message"]
    for answer in served:
        assert answer.json()["usage"]["completion_tokens"] == 4
    assert_no_kv_held("Prefill", "Decode")
