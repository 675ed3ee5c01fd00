"""Disaggregated output equals colocated output, token for token (greedy)."""

import pytest

from tests.integration.helpers import GREEDY, complete, random_prompt, stream_events, streamed_text

# Lengths around the CPU block size (128) and spanning several blocks.
ID_PROMPT_LENGTHS = [3, 17, 127, 128, 129, 300, 700]
TEXT_PROMPTS = [
    "Kalo mine rusa to ve",
    " ".join(["Sa to vide fo gu ha ji po, quari se ti ul."] * 20),
]


def _prompts(offset: int):
    prompts = [random_prompt(offset + n, n) for n in ID_PROMPT_LENGTHS]
    return prompts + TEXT_PROMPTS


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_greedy_outputs_equal_colocated(apps, http, stream):
    for prompt in _prompts(offset=1000 if stream else 0):
        body = {**GREEDY, "prompt": prompt}
        if stream:
            got = streamed_text(stream_events(http, apps.disaggregated, "/v1/completions", body))
            want = streamed_text(stream_events(http, apps.colocated, "/v1/completions", body))
        else:
            got = complete(http, apps.disaggregated, body)["choices"][0]["text"]
            want = complete(http, apps.colocated, body)["choices"][0]["text"]
        assert got == want, f"prompt of {len(prompt)} tokens/chars diverged"
        assert got  # 16 tokens of something


def test_non_stream_usage_counts_tokens(apps, http):
    prompt = random_prompt(7, 40)
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": prompt})
    assert body["usage"]["prompt_tokens"] == 40
    assert body["usage"]["completion_tokens"] == 16
    assert body["choices"][0]["finish_reason"] == "length"


def test_chat_stream_equals_colocated(apps, http):
    body = {
        **GREEDY,
        "messages": [{"role": "user", "content": "Kalo mine rusa?"}],
        "stream_options": {"include_usage": True},
    }
    got = stream_events(http, apps.disaggregated, "/v1/chat/completions", body)
    want = stream_events(http, apps.colocated, "/v1/chat/completions", body)
    assert streamed_text(got) == streamed_text(want)
    assert got[-2]["usage"]["completion_tokens"] == 16


def test_models_and_health(apps, http):
    assert http.get(f"{apps.disaggregated}/health").status_code == 200
    models = http.get(f"{apps.disaggregated}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_serves_proxy_clients_the_same(apps, http):
    """Serve's proxy (`serve run` without the cluster settings, port 8000) serves both apps
    too, with the same outputs as the ingress's own server the other tests use."""
    body = {**GREEDY, "prompt": random_prompt(9005, 300), "max_tokens": 16, "stream": True}
    for direct, via_proxy in (
        (apps.disaggregated, apps.proxy),
        (apps.colocated, f"{apps.proxy}/colocated"),
    ):
        want = streamed_text(stream_events(http, direct, "/v1/completions", body))
        assert streamed_text(stream_events(http, via_proxy, "/v1/completions", body)) == want


def test_concurrent_streams_batch_tokens_into_fewer_chunks(apps, http):
    """With several streams on a replica, each waits (streams / budget) between chunks,
    so one chunk carries the tokens of several engine steps; every token still arrives."""
    from concurrent.futures import ThreadPoolExecutor

    def chunks(seed: int) -> tuple[int, int]:
        body = {**GREEDY, "prompt": random_prompt(seed, 64), "max_tokens": 96}
        body["stream_options"] = {"include_usage": True}
        events = stream_events(http, apps.disaggregated, "/v1/completions", body)
        content = [e for e in events[:-1] if e["choices"] and e["choices"][0]["text"]]
        return len(content), events[-2]["usage"]["completion_tokens"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(chunks, range(31, 39)))
    assert all(tokens == 96 for _, tokens in results), results
    # 8 streams / 200 chunks/s = 40 ms between chunks; a decode step takes a few ms here.
    assert sum(n for n, _ in results) < 0.7 * 8 * 96, results
