"""Hostile and broken clients against the running disaggregated app, in waves: malformed
bodies of many shapes, uploads abandoned halfway, streams dropped after one event,
fan-out bombs, and tenants with their own cache salts. After each wave a normal load is
served in full: no admission slot is held by what came before (a leaked slot would turn
some of the ``max_waiting`` concurrent requests below into 503s)."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from tests.harness.abuse_bodies import BAD_CHATS, BAD_COMPLETIONS, RAW_BODIES
from tests.integration.conftest import ADMISSION_MAX_WAITING
from tests.integration.helpers import GREEDY, random_prompt

JSON = {"content-type": "application/json"}


def _served_in_full(http: Any, base: str) -> None:
    """``max_waiting`` requests at once, each answered 200: every slot is free."""

    def one(number: int) -> int:
        body = {**GREEDY, "prompt": random_prompt(9000 + number, 8), "max_tokens": 4}
        return int(http.post(f"{base}/v1/completions", json=body).status_code)

    with ThreadPoolExecutor(ADMISSION_MAX_WAITING) as pool:
        statuses = list(pool.map(one, range(ADMISSION_MAX_WAITING)))
    assert statuses == [200] * ADMISSION_MAX_WAITING, statuses
    page = http.get(f"{base}/metrics").text  # the ingress's admission gauges, live
    assert "\nsplitserve_admission_waiting 0\n" in page
    assert "\nsplitserve_admission_parsing 0\n" in page


def _status(response: Any) -> int:
    return int(response.status_code)


def test_waves_of_malformed_bodies_are_4xx_and_leave_every_slot_free(apps, http):
    base = apps.disaggregated
    statuses: list[tuple[Any, int]] = []

    def post(item: tuple[str, Any]) -> tuple[Any, int]:
        path, body = item
        if isinstance(body, bytes):
            r = http.post(f"{base}{path}", content=body, headers=JSON)
        else:
            r = http.post(f"{base}{path}", json={"max_tokens": 2, **body})
        return body, _status(r)

    items = [(p, b) for b in RAW_BODIES for p in ("/v1/completions", "/v1/chat/completions")]
    items += [("/v1/chat/completions", b) for b in BAD_CHATS]
    items += [("/v1/completions", b) for b in BAD_COMPLETIONS]
    with ThreadPoolExecutor(16) as pool:
        for _ in range(4):  # about 400 requests
            statuses += pool.map(post, items)
    server_errors = [(body, status) for body, status in statuses if status >= 500]
    assert server_errors == []
    assert sum(1 for _, status in statuses if status >= 400) >= len(RAW_BODIES) * 2 * 4
    _served_in_full(http, base)


def test_abandoned_uploads_and_dropped_streams_leave_every_slot_free(apps, http):
    base = apps.disaggregated
    where = urlsplit(base)
    head = (
        f"POST {where.path}/v1/completions HTTP/1.1\r\nHost: {where.hostname}\r\n"
        "Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
    ).encode()
    for _ in range(4 * ADMISSION_MAX_WAITING):  # far more than there are slots
        with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
            sock.sendall(head + b'{"prompt": "half a bo')
    for number in range(8):  # a stream left after its first event
        body = {**GREEDY, "prompt": random_prompt(9100 + number, 300), "max_tokens": 64}
        with http.stream(
            "POST", f"{base}/v1/completions", json={**body, "stream": True}
        ) as response:
            assert response.status_code == 200
            next(response.iter_lines())
    time.sleep(1.0)  # the ingress sees each close
    _served_in_full(http, base)


def test_a_fan_out_bomb_is_refused_at_once(apps, http):
    body = {"prompt": ["a"] * 1024, "n": 16384, "temperature": 1, "max_tokens": 1}
    started = time.perf_counter()
    r = http.post(f"{apps.disaggregated}/v1/completions", json=body)
    took = time.perf_counter() - started
    assert r.status_code == 400 and "ingress.max_samples" in r.json()["error"]["message"]
    print(f"fan-out bomb refused in {took * 1000:.0f} ms")


def _cached(http: Any, base: str, prompt: list[int], salt: str | None) -> int:
    body: dict[str, Any] = {**GREEDY, "prompt": prompt, "max_tokens": 2}
    if salt is not None:
        body["cache_salt"] = salt
    r = http.post(f"{base}/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_a_prompt_under_two_salts_shares_no_cached_block_and_under_one_it_does(apps, http):
    base = apps.disaggregated
    prompt = random_prompt(9200, 700)  # remote: past local_prefill_below_tokens
    assert _cached(http, base, prompt, "tenant-a") == 0
    assert _cached(http, base, prompt, "tenant-a") > 0  # the same tenant: its cache
    assert _cached(http, base, prompt, "tenant-b") == 0  # another tenant: nothing shared
    assert _cached(http, base, prompt, None) == 0


def test_a_session_id_reaches_no_other_tenants_conversation(apps, http):
    base = apps.disaggregated
    prompt = random_prompt(9300, 700)
    headers = {"x-session-id": "shared-name"}
    body = {**GREEDY, "prompt": prompt, "max_tokens": 2, "cache_salt": "tenant-a"}
    r = http.post(f"{base}/v1/completions", json=body, headers=headers)
    assert r.status_code == 200
    other = {**body, "cache_salt": "tenant-b"}
    r = http.post(f"{base}/v1/completions", json=other, headers=headers)
    assert r.status_code == 200
    report = r.json()["splitserve"]
    assert report["decision"] != "decode_cached", report
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    print(json.dumps(report))
