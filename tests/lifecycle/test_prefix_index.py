"""The prefix router fed by the engines' KV events, end to end: two colocated replicas
(one engine per core) with ``router.prefix_source: kv_events``. Once the router's own
expectation of what it routed has run out, what the engines' events said still sends a
prompt to the replica that holds its prefix, the router expected that replica to hold
it, and the engine found it cached.

Runs in the lifecycle session: it starts and stops a Ray cluster of its own.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from app.routing.prefix_index import EXPECT_S
from load_tests.systems.local_app import LocalApp
from tests.integration.helpers import GREEDY, random_prompt

CONFIG = Path(__file__).parents[2] / "serve_configs" / "colocated_two.yaml"
OVERRIDES = {
    "router": {"prefix_source": "kv_events"},
    "openai": {"enable_prompt_tokens_details": True},
}


def test_the_engines_events_alone_send_a_prefix_to_its_replica():
    with LocalApp(CONFIG, overrides=OVERRIDES) as app, httpx.Client(timeout=120) as http:

        def complete(prompt: list[int]) -> dict[str, Any]:
            body = {**GREEDY, "model": "tiny-llama", "max_tokens": 2, "prompt": prompt}
            response = http.post(app.url + "/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()  # type: ignore[no-any-return]

        systems = [random_prompt(8600 + i, 192) for i in range(4)]  # one 128-token block+
        engines: dict[int, set[str]] = defaultdict(set)
        for i, system in enumerate(systems):
            body = complete(system + random_prompt(8610 + i, 20))
            engines[i].add(body["splitserve"]["decode_engine"])
        # New prefixes spread: the reader's long poll, held by a replica, is not taken
        # for a request in its queue (else they followed the replica that served last).
        assert len(set().union(*engines.values())) == 2, engines
        time.sleep(EXPECT_S + 1.0)  # the router's expectations run out; the index stays
        for i, system in enumerate(systems):
            body = complete(system + random_prompt(8620 + i, 20))
            assert {body["splitserve"]["decode_engine"]} == engines[i], (i, engines)
            assert body["splitserve"]["routed_cached_tokens"] >= 128, body["splitserve"]
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 128, body["usage"]
