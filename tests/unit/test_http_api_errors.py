"""vLLM's OpenAI layer over fake pools: how a request fails or is refused (errors,
deadlines, admission, readiness, the API key, /metrics) and how each is reported.

The serving classes and the engine client are the real ones (no Ray, no engine); only the
pools are fakes (tests/unit/http_api_fakes.py).
"""

import threading
import time

import pytest
from starlette.testclient import TestClient

from app.api.http_api import OpenAIServer
from app.config import IngressConfig
from app.flow.request_timings import RequestTimings
from app.pool.client import PoolBusy
from tests.unit.http_api_fakes import FakePool, make_client, sse_events


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
    client = make_client(engine_client, max_body_bytes=4096)
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["code"] == status


def test_deadline_ends_a_slow_request_with_504(engine_client):
    client = make_client(engine_client, pool=FakePool(delay=0.5), timeout_s=0.2)
    r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 504
    assert "deadline" in r.json()["error"]["message"]


def test_deadline_mid_stream_ends_with_an_error_event(engine_client):
    stalled = FakePool(gate=threading.Event(), gate_before=1)  # one token, then nothing
    client = make_client(engine_client, pool=stalled, timeout_s=0.35)
    r = client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert any("deadline" in e for e in events if e.startswith('{"error"'))


def test_failure_before_the_first_token_is_a_plain_500_that_names_no_internals(
    engine_client, caplog
):
    client = make_client(engine_client, pool=FakePool(fail=True))
    for stream in (False, True):
        r = client.post("/v1/completions", json={"prompt": "hi", "stream": stream})
        assert r.status_code == 500
        message = r.json()["error"]["message"]
        assert "exploded" not in message and "RuntimeError" not in message
        incident = message.rsplit("[", 1)[1].rstrip("]")
        # The details are in the log, under the id the client got.
        assert any(incident in rec.getMessage() for rec in caplog.records)
    assert "engine exploded" in caplog.text


def test_completed_requests_are_reported_with_their_timings(engine_client):
    client = make_client(engine_client)
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
    failing = make_client(engine_client, pool=FakePool(fail=True))
    assert failing.post("/v1/completions", json={"prompt": "hi"}).status_code == 500
    stalled = FakePool(gate=threading.Event(), gate_before=1)  # one token, then nothing
    slow = make_client(engine_client, pool=stalled, timeout_s=0.35)
    slow.post("/v1/completions", json={"prompt": "hi", "stream": True})
    assert ended == ["failed", "cancelled"]


def test_api_key_guards_the_api_but_not_health(engine_client):
    client = make_client(engine_client, api_key="s3cret")
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


def test_any_of_several_keys_is_accepted(engine_client):
    client = make_client(engine_client, api_key=("the-new-key", "the-old-key"))
    for key, status in (("the-new-key", 200), ("the-old-key", 200), ("the-new-ke", 401)):
        headers = {"authorization": f"Bearer {key}"}
        r = client.post("/v1/completions", json={"prompt": "hi"}, headers=headers)
        assert r.status_code == status, key


def test_metrics_are_prometheus_text_without_the_api_key(engine_client):
    async def page():
        return 'vllm:num_requests_running{pool="decode",replica="r1"} 2.0\n'

    client = make_client(engine_client, api_key="s3cret", metrics_page=page)
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert r.text.startswith('vllm:num_requests_running{pool="decode",replica="r1"} 2.0\n')
    # This replica's admission state, live: nothing waits, nothing is being read.
    assert "\nsplitserve_admission_waiting 0\n" in r.text
    assert "\nsplitserve_admission_parsing 0\n" in r.text


def test_metrics_that_cannot_be_read_are_a_503_whose_why_is_in_the_log(engine_client, caplog):
    async def page():
        raise RuntimeError("no Ray metrics agent answered (tried 10.0.0.5:44217)")

    r = make_client(engine_client, metrics_page=page).get("/metrics")
    assert r.status_code == 503
    message = r.json()["error"]["message"]
    assert "10.0.0.5" not in message and "unavailable" in message
    assert "10.0.0.5:44217" in caplog.text


def test_metrics_can_require_the_api_key(engine_client):
    async def page():
        return ""

    key = "k" * 32
    client = make_client(
        engine_client, api_key=key, metrics_page=page, metrics_require_api_key=True
    )
    assert client.get("/metrics").status_code == 401
    ok = client.get("/metrics", headers={"authorization": f"Bearer {key}"})
    assert ok.status_code == 200
    open_page = make_client(engine_client, api_key=key, metrics_page=page)
    assert open_page.get("/metrics").status_code == 200  # vLLM's default: open


def test_a_request_beyond_the_admission_limit_is_refused_at_once_with_retry_after(
    engine_client,
):
    admission = {"max_waiting": 1, "retry_after_s": 7}
    gate = threading.Event()
    pool = FakePool(gate=gate)
    client = make_client(engine_client, pool=pool, admission=admission)
    first: list[int] = []
    waiting = threading.Thread(
        target=lambda: first.append(
            client.post("/v1/completions", json={"prompt": "hi"}).status_code
        )
    )
    waiting.start()
    deadline = time.monotonic() + 10
    while not pool.requests:  # the first request is in the pool
        assert time.monotonic() < deadline, "the first request never reached the pool"
        time.sleep(0.01)
    # The first request waits for its first token until the gate opens: the refusal comes
    # while it still waits, so at once, not after a timeout.
    refused = client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    assert not gate.is_set() and waiting.is_alive()
    assert refused.status_code == 503 and refused.headers["retry-after"] == "7"
    assert "overloaded" in refused.json()["error"]["message"]
    gate.set()
    waiting.join(timeout=10)
    assert first == [200]
    # The first request is done: the next is admitted.
    assert client.post("/v1/completions", json={"prompt": "hi"}).status_code == 200


class BusyPool(FakePool):
    async def generate(self, request):
        raise PoolBusy("Request dropped due to backpressure")
        yield


def test_a_full_decode_queue_is_a_503_with_retry_after(engine_client):
    client = make_client(engine_client, pool=BusyPool())
    for stream in (False, True):
        r = client.post("/v1/completions", json={"prompt": "hi", "stream": stream})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "decode pool's queue is full" in r.json()["error"]["message"]


def test_the_engines_key_is_unique_whatever_x_request_id_the_client_sends(engine_client):
    # vLLM aborts by the engine request id: two clients sending the same X-Request-Id
    # must not share it, or one's disconnect aborts the other's answer.
    pool = FakePool()
    client = make_client(engine_client, pool=pool)
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
    client = make_client(engine_client)
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
    # Bad input is a 400 before the pools are ready too, and no refusal.
    shed = server.admission.shed
    bad = client.post(
        "/v1/completions", content=b"[" * 50, headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert server.admission.shed == shed
    serving["prefill"] = True
    aio.run(readiness.probe_once())
    assert client.get("/health").json() == {
        "status": "ok",
        "pools": {"prefill": "serving", "decode": "serving"},
    }
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    assert r.status_code == 200
