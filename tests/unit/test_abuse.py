"""Hostile and broken clients against the HTTP layer (real vLLM serving classes, fake
pools): every malformed body is a 4xx in the OpenAI error format, never a 5xx; every
admission slot comes back, whatever way the request ends; fan-out is capped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.http_api import OpenAIServer
from app.config import IngressConfig
from tests.harness.abuse_bodies import BAD_CHATS, BAD_COMPLETIONS, RAW_BODIES
from tests.unit.http_api_fakes import make_client

JSON = {"content-type": "application/json"}
CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
M = "tiny-llama"


def _server(engine_client: Any, **ingress: Any) -> tuple[OpenAIServer, TestClient]:
    make_client(engine_client)  # a fresh orchestrator over fake pools
    server = OpenAIServer(engine_client.serving, IngressConfig(**ingress), None)
    return server, TestClient(server.asgi_app(), raise_server_exceptions=False)


def _assert_openai_error(response: Any, body: Any, refused: bool = True) -> None:
    """A 4xx in the OpenAI error format; where ``refused`` is False, vLLM's server may
    also accept the body (200): never a 5xx."""
    if not refused and response.status_code == 200:
        return
    assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == response.status_code and error["message"], error


def test_malformed_bodies_of_every_shape_are_a_4xx_and_give_their_slots_back(engine_client):
    server, client = _server(engine_client, admission={"max_waiting": 2})
    for body in RAW_BODIES:
        for path in (CMPL, CHAT):
            _assert_openai_error(client.post(path, content=body, headers=JSON), body)
    for body in BAD_CHATS:
        reply = client.post(CHAT, json={"model": M, "max_tokens": 2, **body})
        _assert_openai_error(reply, body, refused=False)
    for body in BAD_COMPLETIONS:
        reply = client.post(CMPL, json={"model": M, "max_tokens": 2, **body})
        _assert_openai_error(reply, body, refused=False)
    assert server.admission.waiting == 0
    ok = client.post(CMPL, json={"model": M, "prompt": "hi", "max_tokens": 3})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    ("body", "samples"),
    [
        ({"prompt": ["a"] * 1024, "n": 16384}, 1024 * 16384),
        ({"prompt": "hi", "n": 190}, 190),
        ({"prompt": [[1, 2]] * 65}, 65),
    ],
)
def test_a_fan_out_bomb_is_refused_with_a_400_naming_the_limit(engine_client, body, samples):
    server, client = _server(engine_client)
    response = client.post(CMPL, json={"model": M, "temperature": 1, **body})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert str(samples) in message and "ingress.max_samples" in message
    assert server.admission.waiting == 0


def test_a_request_within_the_sample_limit_is_served(engine_client):
    _, client = _server(engine_client, max_samples=4)
    body = {"model": M, "prompt": ["a", "b"], "n": 2, "temperature": 1, "max_tokens": 3}
    assert client.post(CMPL, json=body).status_code == 200


def _http_scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


async def _drive(server: OpenAIServer, receive: Any) -> list[Any]:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await server.asgi_app()(_http_scope(CMPL), receive, send)
    return sent


async def test_a_client_that_leaves_mid_upload_gives_its_slot_back(engine_client):
    server, _ = _server(engine_client)
    messages: Any = iter(
        [
            {"type": "http.request", "body": b'{"pro', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> dict[str, Any]:
        return next(messages)

    await _drive(server, receive)
    assert server.admission.waiting == 0


def _stalls_after_a_part() -> Any:
    """An ASGI ``receive`` that sends part of a body, then nothing more (a slow upload)."""
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"pro', "more_body": True}
        await asyncio.sleep(3600)
        raise AssertionError("never")

    return receive


async def test_a_request_cancelled_mid_upload_gives_its_slot_back(engine_client):
    server, _ = _server(engine_client)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(_drive(server, _stalls_after_a_part()), 0.2)
    assert server.admission.waiting == 0


async def test_a_body_slower_than_the_deadline_is_a_408_and_gives_its_slot_back(engine_client):
    server, _ = _server(engine_client, body_timeout_s=0.2)
    sent = await asyncio.wait_for(_drive(server, _stalls_after_a_part()), 5)
    assert sent[0]["status"] == 408
    assert b"ingress.body_timeout_s" in sent[1]["body"]
    assert server.admission.waiting == 0


def test_the_key_is_checked_before_readiness_and_admission_and_is_no_demand(engine_client):
    arrivals: list[int] = []
    make_client(engine_client)
    server = OpenAIServer(
        engine_client.serving,
        IngressConfig(admission={"max_waiting": 1}),
        "k" * 32,
        on_arrival=lambda: arrivals.append(1),
    )
    client = TestClient(server.asgi_app(), raise_server_exceptions=False)
    for _ in range(20):
        r = client.post(CMPL, json={"model": M, "prompt": "hi"})
        assert r.status_code == 401
    assert server.admission.waiting == 0 and server.admission.shed == 0 and arrivals == []
    ok = client.post(
        CMPL,
        json={"model": M, "prompt": "hi", "max_tokens": 3},
        headers={"authorization": "Bearer " + "k" * 32},
    )
    assert ok.status_code == 200 and arrivals == [1]


def test_bodies_that_are_json_but_not_objects_name_what_they_are(engine_client):
    _, client = _server(engine_client)
    r = client.post(CMPL, content=json.dumps([1, 2]), headers=JSON)
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]


def test_bad_input_is_a_4xx_even_while_requests_are_refused(engine_client):
    import threading
    import time

    from tests.unit.http_api_fakes import FakePool

    gate = threading.Event()
    make_client(engine_client, pool=FakePool(gate=gate))
    config = IngressConfig(admission={"max_waiting": 1, "retry_after_s": 7})
    server = OpenAIServer(engine_client.serving, config, None)
    client = TestClient(server.asgi_app(), raise_server_exceptions=False)
    waiting = threading.Thread(target=lambda: client.post(CMPL, json={"model": M, "prompt": "hi"}))
    waiting.start()
    # the first request holds the only slot until the gate opens: the next are refused
    deadline = time.monotonic() + 10
    while server.admission.waiting < 1:
        assert time.monotonic() < deadline, "the first request was never admitted"
        time.sleep(0.01)
    for body in RAW_BODIES:
        _assert_openai_error(client.post(CMPL, content=body, headers=JSON), body)
    for body in BAD_CHATS:
        reply = client.post(CHAT, json={"model": M, "max_tokens": 2, **body})
        assert reply.status_code != 200, body  # were it good, it would be refused
        if reply.status_code == 503:  # a body vLLM's server accepts
            assert reply.headers["retry-after"] == "7"
        else:
            _assert_openai_error(reply, body)
    bad = server.admission.shed
    refused = client.post(CMPL, json={"model": M, "prompt": "hi"})
    assert refused.status_code == 503 and refused.headers["retry-after"] == "7"
    assert server.admission.shed == bad + 1  # a 4xx is no refusal; a 503 is counted
    gate.set()
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    assert server.admission.waiting == 0


def test_a_lone_surrogate_escape_is_a_400_and_a_pair_is_one_character(engine_client):
    _, client = _server(engine_client)
    lone = client.post(CMPL, content=b'{"prompt": "a\\udc00b"}', headers=JSON)
    assert lone.status_code == 400 and "surrogate" in lone.json()["error"]["message"]
    pair = client.post(CMPL, content=b'{"prompt": "\\ud83d\\ude00", "max_tokens": 2}', headers=JSON)
    assert pair.status_code == 200, pair.text
