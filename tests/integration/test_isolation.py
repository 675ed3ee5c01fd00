"""No client reaches another's request: two streams sent with the same X-Request-Id, one
client hangs up after its first token, and the other still gets its whole answer."""

import threading

import httpx

from load_tests.client.sse import sse_json_sync
from tests.integration.helpers import random_prompt

TOKENS = 200
HEADERS = {"X-Request-Id": "shared-by-two-clients"}
BODY = {
    "model": "tiny-llama",
    "max_tokens": TOKENS,
    "temperature": 0,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def test_a_client_hanging_up_does_not_cut_another_with_the_same_request_id(apps):
    url = f"{apps.disaggregated}/v1/completions"
    streaming = threading.Event()
    usage: dict[str, int] = {}

    def whole_answer() -> None:
        payload = {**BODY, "prompt": random_prompt(8802, 200)}
        with (
            httpx.Client(timeout=120) as client,
            client.stream("POST", url, json=payload, headers=HEADERS) as response,
        ):
            for event in sse_json_sync(response):
                streaming.set()
                usage.update(event.get("usage") or {})

    thread = threading.Thread(target=whole_answer)
    thread.start()
    assert streaming.wait(60)
    payload = {**BODY, "prompt": random_prompt(8801, 200)}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", url, json=payload, headers=HEADERS) as response,
    ):
        assert response.status_code == 200
        for _ in sse_json_sync(response):
            break  # hang up after the first token
    thread.join(120)
    assert not thread.is_alive()
    # Cut short, it would still end with 200 and [DONE], but with fewer tokens.
    assert usage.get("completion_tokens") == TOKENS, usage
