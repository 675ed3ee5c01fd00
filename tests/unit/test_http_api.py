"""The Starlette app against fake pools: routing, SSE framing, error bodies, deadlines."""

import asyncio
import json

import pytest
from starlette.testclient import TestClient

from app.config import IngressConfig, Mode
from app.http_api import OpenAIServer
from app.openai_requests import RequestParser
from app.orchestrator import Orchestrator, PoolClient, RequestTimings
from app.records import PrefillResult, TokenChunk


class FakePool(PoolClient):
    def __init__(self, delay=0.0, fail=False):
        self.delay = delay
        self.fail = fail

    async def prefill(self, request, transport=None):
        return PrefillResult({"remote_block_ids": [[1]]}, len(request.prompt_token_ids), 0.0)

    async def generate(self, request):
        if self.fail:
            raise RuntimeError("engine exploded")
        for i in range(3):
            await asyncio.sleep(self.delay)
            yield TokenChunk(
                f"t{i}", [10 + i], finish_reason="length" if i == 2 else None, num_cached_tokens=2
            )


def _client(tokenizer, pool=None, **ingress):
    config = IngressConfig(**ingress)
    parser = RequestParser(tokenizer, "tiny-llama", max_model_len=64)
    orchestrator = Orchestrator(Mode.DISAGGREGATED, pool or FakePool(), FakePool())
    return TestClient(OpenAIServer(parser, orchestrator, config).asgi_app())


@pytest.fixture
def client(tokenizer):
    return _client(tokenizer)


def _events(text):
    return [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]


def test_completion_non_stream(client):
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "tiny-llama"
    assert body["choices"][0]["text"] == "t0t1t2"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}


def test_chat_stream_is_sse_ending_in_done(client):
    r = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        == "t0t1t2"
    )
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_models_and_health(client):
    assert client.get("/health").status_code == 200
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny-llama"


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "words"),
    [
        (
            "post",
            "/v1/completions",
            {"content": b'{"prompt": ', "headers": {"content-type": "application/json"}},
            400,
            "not valid JSON",
        ),
        (
            "post",
            "/v1/completions",
            {"content": b"\xff\xfe{}", "headers": {"content-type": "application/json"}},
            400,
            "UTF-8",
        ),
        (
            "post",
            "/v1/completions",
            {
                "content": b"prompt=hi",
                "headers": {"content-type": "application/x-www-form-urlencoded"},
            },
            415,
            "Content-Type",
        ),
        (
            "post",
            "/v1/completions",
            {
                "content": b'{"prompt": "' + b"a" * 5000 + b'"}',
                "headers": {"content-type": "application/json"},
            },
            413,
            "larger than",
        ),
        ("get", "/v1/completions", {}, 405, "not allowed"),
        ("post", "/v1/nothing", {"json": {}}, 404, "no route"),
    ],
)
def test_http_errors_are_openai_shaped(tokenizer, method, path, kwargs, status, words):
    client = _client(tokenizer, max_body_bytes=4096)
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status
    error = r.json()["error"]
    assert words in error["message"] and error["code"] == status


def test_deadline_ends_a_slow_request_with_504(tokenizer):
    client = _client(tokenizer, pool=FakePool(delay=0.5), request_timeout_s=0.2)
    r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 504
    assert "deadline" in r.json()["error"]["message"]


def test_deadline_mid_stream_ends_with_an_error_event(tokenizer):
    client = _client(tokenizer, pool=FakePool(delay=0.15), request_timeout_s=0.35)
    r = client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    assert any("deadline" in e for e in events if e.startswith('{"error"'))


def test_pool_failure_is_a_short_500(tokenizer):
    client = _client(tokenizer, pool=FakePool(fail=True))
    r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 500
    assert r.json()["error"]["message"].endswith("RuntimeError: engine exploded")


def test_completed_requests_are_reported_with_their_timings(tokenizer):
    done: list[RequestTimings] = []
    parser = RequestParser(tokenizer, "tiny-llama", max_model_len=64)
    orchestrator = Orchestrator(Mode.COLOCATED, FakePool())
    server = OpenAIServer(parser, orchestrator, IngressConfig(), on_complete=done.append)
    client = TestClient(server.asgi_app())
    client.post("/v1/completions", json={"prompt": "hi"})
    client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    client.post("/v1/completions", json={"prompt": ""})  # refused: not a completed request
    assert len(done) == 2
    for timings in done:
        assert 0 < timings.first_token_s <= timings.total_s
        assert len(timings.token_gaps_s) == 2  # three chunks of one token each


def test_api_key_guards_the_api_but_not_health(tokenizer):
    config = IngressConfig()
    parser = RequestParser(tokenizer, "tiny-llama", max_model_len=64)
    orchestrator = Orchestrator(Mode.COLOCATED, FakePool())
    client = TestClient(OpenAIServer(parser, orchestrator, config, api_key="s3cret").asgi_app())
    assert client.get("/health").status_code == 200
    for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": "s3cret"}):
        r = client.post("/v1/completions", json={"prompt": "hi"}, headers=headers)
        assert r.status_code == 401 and "API key" in r.json()["error"]["message"]
        assert client.get("/v1/models", headers=headers).status_code == 401
    ok = client.post(
        "/v1/completions", json={"prompt": "hi"}, headers={"authorization": "Bearer s3cret"}
    )
    assert ok.status_code == 200
