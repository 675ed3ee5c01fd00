"""Bad requests get a 4xx with a clear message, and the app keeps serving."""

import pytest

from tests.integration.helpers import GREEDY, complete

JSON = {"content-type": "application/json"}

CASES = [
    # (id, method, path, content, headers, status, words in the message)
    ("malformed-json", "POST", "/v1/completions", b'{"prompt": "hi",', JSON, 400, "not valid JSON"),
    ("missing-prompt", "POST", "/v1/completions", b'{"max_tokens": 4}', JSON, 400, "prompt"),
    (
        "wrong-type",
        "POST",
        "/v1/completions",
        b'{"prompt": "hi", "max_tokens": "x"}',
        JSON,
        400,
        "max_tokens",
    ),
    (
        "too-long",
        "POST",
        "/v1/completions",
        b'{"prompt": [5], "max_tokens": 100000}',
        JSON,
        400,
        "maximum context length",
    ),
    (
        "prompt-over-max-model-len",
        "POST",
        "/v1/completions",
        ('{"prompt": [' + ",".join(["5"] * 1100) + "]}").encode(),
        JSON,
        400,
        "maximum context length",
    ),
    (
        "max-tokens-zero",
        "POST",
        "/v1/completions",
        b'{"prompt": "hi", "max_tokens": 0}',
        JSON,
        400,
        "at least 1",
    ),
    (
        "unknown-model",
        "POST",
        "/v1/completions",
        b'{"prompt": "hi", "model": "nope"}',
        JSON,
        404,
        "does not exist",
    ),
    (
        "client-kv-params",
        "POST",
        "/v1/completions",
        b'{"prompt": "hi", "kv_transfer_params": {"do_remote_prefill": true, '
        b'"remote_block_ids": [[1, 2]]}}',
        JSON,
        400,
        "set by the server",
    ),
    (
        "chat-missing-messages",
        "POST",
        "/v1/chat/completions",
        b'{"max_tokens": 2}',
        JSON,
        400,
        "messages",
    ),
    (
        "wrong-content-type",
        "POST",
        "/v1/completions",
        b"prompt=hi",
        {"content-type": "text/plain"},
        415,
        "Content-Type",
    ),
    ("wrong-method", "GET", "/v1/chat/completions", b"", {}, 405, "not allowed"),
]


@pytest.mark.parametrize(
    ("method", "path", "content", "headers", "status", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_request_is_a_clear_4xx(apps, http, method, path, content, headers, status, words):
    response = http.request(method, f"{apps.disaggregated}{path}", content=content, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error["message"]
    assert error["code"] == status and error["type"]


def test_app_keeps_serving_after_bad_requests(apps, http):
    for _, method, path, content, headers, _, _ in CASES:
        http.request(method, f"{apps.disaggregated}{path}", content=content, headers=headers)
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": "Kalo mine"})
    assert body["usage"]["completion_tokens"] == 16
