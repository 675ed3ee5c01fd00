"""vLLM's OpenAI layer over fake pools: what a request gets back (routing, SSE, n,
logprobs, batches, tokenize).

The serving classes and the engine client are the real ones (no Ray, no engine); only the
pools are fakes (tests/unit/http_api_fakes.py), which stream a few tokens.
"""

import json

from app.pool.records import PrefillResult, Started, TokenChunk
from tests.unit.http_api_fakes import FakePool, make_client, sse_events


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
    events = sse_events(r)
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
    client = make_client(engine_client, pool=decode, prefill=prefill)
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
    client = make_client(engine_client, pool=decode, prefill=prefill)
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
    client = make_client(engine_client, pool=decode, prefill=prefill)
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
    client = make_client(engine_client, pool=FirstSampleEmptyPool(), timeout_s=5.0)
    r = client.post(
        "/v1/completions",
        json={"prompt": "hi", "max_tokens": 3, "n": 2, "temperature": 1, "seed": 5},
    )
    # Before: sample 1 waited for sample 0's first token until the deadline (504).
    assert r.status_code == 200, r.text


class FirstTokenPrefill(FakePool):
    """Samples the answer's first token (decode's first, token 10) when asked."""

    async def prefill(self, request, transport=None):
        self.prefills.append(request)
        yield Started("p-1")
        first = TokenChunk("t10", [10], num_cached_tokens=1) if request.sample_first_token else None
        yield PrefillResult(
            {"remote_block_ids": [[1]]},
            len(request.prompt_token_ids),
            num_cached_tokens=5,
            first_token=first,
            block_tokens=16,
        )


class SampleOrder(FakePool):
    """Notes, as each parallel sample's request comes, how many chunks sample 0's
    decode stream had sent by then."""

    def __init__(self):
        super().__init__()
        self.sent_by_first = 0
        self.seen_at_parallel: list[int] = []

    async def generate(self, request):
        first = request.local_prefill_reason != "parallel_sample"
        if not first:
            self.seen_at_parallel.append(self.sent_by_first)
        async for chunk in super().generate(request):
            if first:
                self.sent_by_first += 1
            yield chunk


def _first_token_client(engine_client, decode, prefill):
    client = make_client(engine_client, pool=decode, prefill=prefill)
    engine_client.orchestrator.first_token_on_prefill = True
    return client


def test_parallel_samples_wait_for_decode_to_have_the_prompt_not_for_prefills_token(
    engine_client,
):
    decode, prefill = SampleOrder(), FirstTokenPrefill()
    client = _first_token_client(engine_client, decode, prefill)
    r = client.post(
        "/v1/completions", json={"prompt": "hi", "max_tokens": 3, "n": 2, "temperature": 1}
    )
    assert r.status_code == 200, r.text
    assert prefill.prefills[0].sample_first_token  # sample 0's first token from prefill
    assert decode.seen_at_parallel and decode.seen_at_parallel[0] >= 1


def test_streamed_usage_counts_cached_tokens_as_the_answer_does(engine_client):
    decode, prefill = FakePool(), FirstTokenPrefill()
    client = _first_token_client(engine_client, decode, prefill)
    body = {"prompt": "hi", "max_tokens": 3, "temperature": 0}
    whole = client.post("/v1/completions", json=body)
    assert whole.status_code == 200, whole.text
    with client.stream(
        "POST",
        "/v1/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
    ) as streamed:
        events = [json.loads(e) for e in sse_events(streamed)[:-1]]
    usage = events[-1]["usage"]
    assert prefill.prefills[0].sample_first_token
    cached = whole.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    # the prefill's count, not decode's (2), on both
    assert usage["prompt_tokens_details"]["cached_tokens"] == cached == 1
