"""vLLM's OpenAI layer over fake pools: routing, SSE, errors, deadlines, n, logprobs, batches.

The serving classes and the engine client are the real ones (no Ray, no engine); only the
pools are fakes, which stream a few tokens.
"""

import asyncio
import json
import time

import pytest
from starlette.testclient import TestClient

from app.api.engine_client import PoolEngineClient
from app.api.http_api import OpenAIServer
from app.api.openai_serving import build_serving
from app.config import AppConfig, IngressConfig, Mode
from app.engine.model_source import resolve_model
from app.engine.setup import ingress_vllm_config
from app.flow.orchestrator import Orchestrator
from app.flow.pool_client import PoolBusy, PoolClient
from app.flow.records import GenerateRequest, PrefillResult, Started, TokenChunk
from app.flow.request_timings import RequestTimings


class FakePool(PoolClient):
    """Streams three one-token chunks (with logprobs when asked); remembers its requests."""

    def __init__(self, delay=0.0, fail=False):
        self.delay = delay
        self.fail = fail
        self.requests: list[GenerateRequest] = []
        self.prefills: list[GenerateRequest] = []

    async def prefill(self, request, transport=None):
        self.prefills.append(request)
        yield Started("p-1")
        yield PrefillResult({"remote_block_ids": [[1]]}, len(request.prompt_token_ids))

    async def generate(self, request):
        from vllm.logprobs import Logprob

        self.requests.append(request)
        if self.fail:
            raise RuntimeError("engine exploded")
        params = request.sampling_params
        seed = params.seed or 0
        for i in range(3):
            await asyncio.sleep(self.delay)
            token = 10 + i + seed
            logprobs = None
            if params.logprobs is not None:
                logprobs = [{token: Logprob(-0.5 * (i + 1), 1, "x"), 99: Logprob(-3.0, 2, "y")}]
            prompt_logprobs = None
            if i == 0 and params.prompt_logprobs is not None:
                prompt_logprobs = [None] + [
                    {t: Logprob(-1.0, 1, "p")} for t in request.prompt_token_ids[1:]
                ]
            yield TokenChunk(
                f"t{token}",
                [token],
                finish_reason="length" if i == 2 else None,
                num_cached_tokens=2,
                logprobs=logprobs,
                cumulative_logprob=-0.5 * (i + 1) if logprobs else None,
                prompt_logprobs=prompt_logprobs,
            )


@pytest.fixture(scope="module")
def engine_client():
    config = AppConfig()
    path = resolve_model(config.model.source)
    client = PoolEngineClient(
        ingress_vllm_config(config, path), Orchestrator(Mode.COLOCATED, FakePool()), 10
    )
    client.serving = build_serving(client, config, path)  # type: ignore[attr-defined]
    return client


def _client(
    engine_client,
    pool=None,
    prefill=None,
    api_key=None,
    timeout_s=10.0,
    metrics_page=None,
    **ingress,
):
    pool = pool or FakePool()
    engine_client.orchestrator = Orchestrator(
        Mode.DISAGGREGATED, pool, prefill or FakePool(), local_prefill_below_tokens=0
    )
    engine_client.request_timeout_s = timeout_s
    engine_client.on_complete = None
    server = OpenAIServer(engine_client.serving, IngressConfig(**ingress), api_key, metrics_page)
    return TestClient(server.asgi_app())


@pytest.fixture
def client(engine_client):
    return _client(engine_client)


def _events(text):
    return [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]


def test_completion_non_stream_carries_the_transfer_report(client):
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "tiny-llama"
    assert body["choices"][0]["text"] == "t10t11t12"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert body["splitserve"]["disaggregated"] is True
    assert body["splitserve"]["kv_transport"] == "nixl"


def test_chat_stream_is_sse_ending_in_done_with_the_report_on_usage(client):
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
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "t10t11t12"
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert chunks[-1]["splitserve"]["decision"] == "long_prompt"
    assert all("splitserve" not in c for c in chunks[:-1])


def test_n_samples_prefill_once_and_seed_each_sample(engine_client):
    decode, prefill = FakePool(), FakePool()
    client = _client(engine_client, pool=decode, prefill=prefill)
    r = client.post(
        "/v1/completions",
        json={"prompt": "hi", "max_tokens": 3, "n": 2, "temperature": 1, "seed": 5},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    texts = {c["index"]: c["text"] for c in body["choices"]}
    assert texts == {0: "t15t16t17", 1: "t16t17t18"}  # seeds 5 and 6, as vLLM seeds samples
    assert body["usage"]["completion_tokens"] == 6
    assert len(prefill.prefills) == 1  # one remote prefill
    assert [r.local_prefill_reason for r in decode.requests] == [None, "parallel_sample"]
    assert [t["decision"] for t in body["splitserve"]["requests"]] == [
        "long_prompt",
        "parallel_sample",
    ]


def test_logprobs_come_from_decode_and_are_formatted_by_vllm(client):
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3, "logprobs": 1})
    assert r.status_code == 200, r.text
    logprobs = r.json()["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"] == [-0.5, -1.0, -1.5]
    assert len(logprobs["top_logprobs"]) == 3
    chat = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 3,
            "logprobs": True,
            "top_logprobs": 2,
        },
    )
    assert chat.status_code == 200, chat.text
    content = chat.json()["choices"][0]["logprobs"]["content"]
    assert [c["logprob"] for c in content] == [-0.5, -1.0, -1.5]
    assert all(len(c["top_logprobs"]) == 2 for c in content)


def test_echo_with_logprobs_prefills_on_decode(engine_client):
    decode, prefill = FakePool(), FakePool()
    client = _client(engine_client, pool=decode, prefill=prefill)
    r = client.post(
        "/v1/completions",
        json={"prompt": "hello", "max_tokens": 3, "echo": True, "logprobs": 0},
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"].startswith("hello") and choice["text"].endswith("t12")
    assert choice["logprobs"]["token_logprobs"][0] is None  # the first prompt token has none
    assert not prefill.prefills
    assert r.json()["splitserve"]["decision"] == "prompt_logprobs"


def test_batched_prompts_are_one_request_each(engine_client):
    decode, prefill = FakePool(), FakePool()
    client = _client(engine_client, pool=decode, prefill=prefill)
    r = client.post("/v1/completions", json={"prompt": ["a", "bb", "ccc"], "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert [c["index"] for c in r.json()["choices"]] == [0, 1, 2]
    assert len(prefill.prefills) == 3 and len(decode.requests) == 3
    assert len(r.json()["splitserve"]["requests"]) == 3


def test_tokenize_and_detokenize_round_trip(client):
    ids = client.post("/tokenize", json={"prompt": "hello there"}).json()["tokens"]
    assert ids and all(isinstance(t, int) for t in ids)
    assert client.post("/detokenize", json={"tokens": ids}).json()["prompt"].endswith("hello there")


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
        ("post", "/v1/completions", {"json": {"prompt": "hi", "max_tokens": 0}}, 400, "max_tokens"),
        (
            "post",
            "/v1/completions",
            {"json": {"prompt": "hi", "model": "x"}},
            404,
            "does not exist",
        ),
        (
            "post",
            "/v1/completions",
            {"json": {"prompt": "hi", "kv_transfer_params": {"do_remote_prefill": True}}},
            400,
            "set by the server",
        ),
        (
            "post",
            "/v1/completions",
            {"json": {"prompt": "hi", "use_beam_search": True}},
            400,
            "beam search",
        ),
    ],
)
def test_http_errors_are_openai_shaped(engine_client, method, path, kwargs, status, words):
    client = _client(engine_client, max_body_bytes=4096)
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["code"] == status


def test_deadline_ends_a_slow_request_with_504(engine_client):
    client = _client(engine_client, pool=FakePool(delay=0.5), timeout_s=0.2)
    r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 504
    assert "deadline" in r.json()["error"]["message"]


def test_deadline_mid_stream_ends_with_an_error_event(engine_client):
    client = _client(engine_client, pool=FakePool(delay=0.15), timeout_s=0.35)
    r = client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    assert any("deadline" in e for e in events if e.startswith('{"error"'))


def test_failure_before_the_first_token_is_a_plain_500(engine_client):
    client = _client(engine_client, pool=FakePool(fail=True))
    for stream in (False, True):
        r = client.post("/v1/completions", json={"prompt": "hi", "stream": stream})
        assert r.status_code == 500
        assert "RuntimeError: engine exploded" in r.json()["error"]["message"]


def test_completed_requests_are_reported_with_their_timings(engine_client):
    client = _client(engine_client)
    done: list[RequestTimings] = []
    engine_client.on_complete = done.append
    client.post("/v1/completions", json={"prompt": "hi"})
    client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    client.post("/v1/completions", json={"prompt": ""})  # refused: not a completed request
    assert len(done) == 2
    for timings in done:
        assert 0 < timings.first_token_s <= timings.total_s
        assert len(timings.token_gaps_s) == 2  # three chunks of one token each


def test_requests_that_do_not_complete_are_reported_with_how_they_ended(engine_client):
    ended: list[str] = []
    engine_client.on_unfinished = lambda timings, outcome: ended.append(outcome)
    failing = _client(engine_client, pool=FakePool(fail=True))
    assert failing.post("/v1/completions", json={"prompt": "hi"}).status_code == 500
    slow = _client(engine_client, pool=FakePool(delay=0.15), timeout_s=0.35)
    slow.post("/v1/completions", json={"prompt": "hi", "stream": True})
    assert ended == ["failed", "cancelled"]


def test_api_key_guards_the_api_but_not_health(engine_client):
    client = _client(engine_client, api_key="s3cret")
    assert client.get("/health").status_code == 200
    for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": "s3cret"}):
        r = client.post("/v1/completions", json={"prompt": "hi"}, headers=headers)
        assert r.status_code == 401 and "API key" in r.json()["error"]["message"]
        assert client.get("/v1/models", headers=headers).status_code == 401
        assert client.post("/tokenize", json={"prompt": "hi"}, headers=headers).status_code == 401
    ok = client.post(
        "/v1/completions", json={"prompt": "hi"}, headers={"authorization": "Bearer s3cret"}
    )
    assert ok.status_code == 200


def test_metrics_are_prometheus_text_without_the_api_key(engine_client):
    async def page():
        return 'vllm:num_requests_running{pool="decode",replica="r1"} 2.0\n'

    client = _client(engine_client, api_key="s3cret", metrics_page=page)
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert r.text == 'vllm:num_requests_running{pool="decode",replica="r1"} 2.0\n'


def test_metrics_that_cannot_be_read_are_a_503_naming_why(engine_client):
    async def page():
        raise RuntimeError("no Ray metrics agent answered (tried 127.0.0.1:1)")

    r = _client(engine_client, metrics_page=page).get("/metrics")
    assert r.status_code == 503
    assert "no Ray metrics agent answered" in r.json()["error"]["message"]


def test_a_request_beyond_the_admission_limit_is_refused_at_once_with_retry_after(
    engine_client,
):
    import threading
    import time

    admission = {"max_waiting": 1, "retry_after_s": 7}
    client = _client(engine_client, pool=FakePool(delay=0.5), admission=admission)
    first: list[int] = []
    waiting = threading.Thread(
        target=lambda: first.append(
            client.post("/v1/completions", json={"prompt": "hi"}).status_code
        )
    )
    waiting.start()
    time.sleep(0.2)  # the first request waits for its first token
    started = time.monotonic()
    refused = client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    assert time.monotonic() - started < 0.3  # at once, not after a timeout
    assert refused.status_code == 503 and refused.headers["retry-after"] == "7"
    assert "overloaded" in refused.json()["error"]["message"]
    waiting.join()
    assert first == [200]
    # The first request is done: the next is admitted.
    assert client.post("/v1/completions", json={"prompt": "hi"}).status_code == 200


class BusyPool(FakePool):
    async def generate(self, request):
        raise PoolBusy("Request dropped due to backpressure")
        yield


def test_a_full_decode_queue_is_a_503_with_retry_after(engine_client):
    client = _client(engine_client, pool=BusyPool())
    for stream in (False, True):
        r = client.post("/v1/completions", json={"prompt": "hi", "stream": stream})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "decode pool's queue is full" in r.json()["error"]["message"]


def test_the_engines_key_is_unique_whatever_x_request_id_the_client_sends(engine_client):
    # vLLM aborts by the engine request id: two clients sending the same X-Request-Id
    # must not share it, or one's disconnect aborts the other's answer.
    pool = FakePool()
    client = _client(engine_client, pool=pool)
    for _ in range(2):
        r = client.post(
            "/v1/completions",
            json={"prompt": "hi", "max_tokens": 3},
            headers={"X-Request-Id": "same"},
        )
        assert r.status_code == 200 and r.headers.get("x-request-id") in (None, "same")
    ids = [request.request_id for request in pool.requests]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert all("same" in i for i in ids)  # still traceable to the client's id in logs


def test_health_and_the_api_answer_503_until_every_pool_serves(engine_client):
    import asyncio as aio

    from app.api.readiness import Readiness

    serving = {"prefill": False, "decode": True}

    async def probe(pool, ever):
        return serving[pool]

    readiness = Readiness(("prefill", "decode"), "decode", probe)
    client = _client(engine_client)
    server = OpenAIServer(engine_client.serving, IngressConfig(), None, readiness=readiness)
    client = TestClient(server.asgi_app())
    aio.run(readiness.probe_once())
    health = client.get("/health")
    assert health.status_code == 503 and health.headers["retry-after"] == "1"
    assert health.json()["pools"]["prefill"] == "starting"
    for r in (
        client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3}),
        client.get("/v1/models"),
    ):
        assert r.status_code == 503 and r.headers["retry-after"]
        assert "no warm replica of the prefill pool" in r.json()["error"]["message"]
    serving["prefill"] = True
    aio.run(readiness.probe_once())
    assert client.get("/health").json() == {
        "status": "ok",
        "pools": {"prefill": "serving", "decode": "serving"},
    }
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    assert r.status_code == 200


class FirstSampleEmptyPool(FakePool):
    """The first sample's stream ends with no chunk; the others stream normally."""

    async def generate(self, request):
        if request.local_prefill_reason is None:
            self.requests.append(request)
            return
            yield
        async for chunk in super().generate(request):
            yield chunk


def test_n_samples_do_not_wait_for_a_first_sample_that_produced_nothing(engine_client):
    client = _client(engine_client, pool=FirstSampleEmptyPool(), timeout_s=5.0)
    started = time.monotonic()
    r = client.post(
        "/v1/completions",
        json={"prompt": "hi", "max_tokens": 3, "n": 2, "temperature": 1, "seed": 5},
    )
    # Before: sample 1 waited for sample 0's first token until the deadline (504).
    assert time.monotonic() - started < 4.0
    assert r.status_code == 200, r.text
