"""Bad requests get a 4xx OpenAI-shaped error saying what is wrong; none gets a 5xx.

Most messages are vLLM's own (its serving classes validate); tests/integration/test_vs_vllm.py
checks that vLLM's server answers the same inputs with the same status."""

import json

import pytest

from tests.integration.helpers import GREEDY, complete

JSON = {"content-type": "application/json"}
C, CHAT = "/v1/completions", "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def _j(body) -> bytes:
    return json.dumps(body).encode()


# (id, method, path, body bytes, headers, status, words the message must hold)
CASES = [
    ("malformed-json", "POST", C, b'{"prompt": "hi",', JSON, 400, "not valid JSON"),
    ("truncated-json", "POST", C, b'{"prompt": "hi", "max_tok', JSON, 400, "not valid JSON"),
    ("empty-body", "POST", C, b"", JSON, 400, "not valid JSON"),
    ("json-array", "POST", C, b"[1, 2]", JSON, 400, "JSON object"),
    ("json-string", "POST", C, b'"hello"', JSON, 400, "JSON object"),
    ("invalid-utf8", "POST", C, b'{"prompt": "\xff\xfe"}', JSON, 400, "UTF-8"),
    ("missing-prompt", "POST", C, _j({"max_tokens": 4}), JSON, 400, "prompt"),
    ("empty-prompt", "POST", C, _j({"prompt": ""}), JSON, 400, "empty"),
    ("empty-token-prompt", "POST", C, _j({"prompt": []}), JSON, 400, "at least one prompt"),
    ("prompt-wrong-type", "POST", C, _j({"prompt": {"text": "hi"}}), JSON, 400, "prompt"),
    ("token-out-of-vocab", "POST", C, _j({"prompt": [5, 10**6]}), JSON, 400, "out of vocabulary"),
    ("negative-token", "POST", C, _j({"prompt": [5, -1]}), JSON, 400, "prompt"),
    (
        "prompt-over-max-model-len",
        "POST",
        C,
        _j({"prompt": [5] * 2100}),  # max_model_len is 2048
        JSON,
        400,
        "maximum context length",
    ),
    ("max-tokens-zero", "POST", C, _j({"prompt": "hi", "max_tokens": 0}), JSON, 400, "at least 1"),
    (
        "max-tokens-negative",
        "POST",
        C,
        _j({"prompt": "hi", "max_tokens": -5}),
        JSON,
        400,
        "at least 1",
    ),
    (
        "max-tokens-huge",
        "POST",
        C,
        _j({"prompt": "hi", "max_tokens": 10**12}),
        JSON,
        400,
        "cannot be greater than max_model_len",
    ),
    (
        "max-tokens-string",
        "POST",
        C,
        _j({"prompt": "hi", "max_tokens": "ten"}),
        JSON,
        400,
        "max_tokens",
    ),
    (
        "temperature-negative",
        "POST",
        C,
        _j({"prompt": "hi", "temperature": -0.5}),
        JSON,
        400,
        "temperature",
    ),
    ("top-p-out-of-range", "POST", C, _j({"prompt": "hi", "top_p": 7}), JSON, 400, "top_p"),
    (
        "unknown-model",
        "POST",
        C,
        _j({"prompt": "hi", "model": "gpt-4"}),
        JSON,
        404,
        "does not exist",
    ),
    (
        "client-kv-transfer-params",
        "POST",
        C,
        _j(
            {
                "prompt": "hi",
                "kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [[1, 2]]},
            }
        ),
        JSON,
        400,
        "set by the server",
    ),
    (
        "client-vllm-xargs",
        "POST",
        C,
        _j({"prompt": "hi", "vllm_xargs": {"kv_transfer_params": {}}}),
        JSON,
        400,
        "set by the server",
    ),
    (
        "stream-wrong-type",
        "POST",
        C,
        _j({"prompt": "hi", "stream": "yes please"}),
        JSON,
        400,
        "stream",
    ),
    ("body-over-limit", "POST", C, _j({"prompt": "a" * (2 << 20)}), JSON, 413, "larger than"),
    (
        "wrong-content-type",
        "POST",
        C,
        b"prompt=hi",
        {"content-type": "text/plain"},
        415,
        "Content-Type",
    ),
    ("no-content-type", "POST", C, _j({"prompt": "hi"}), {"content-type": ""}, 415, "Content-Type"),
    ("chat-missing-messages", "POST", CHAT, _j({"max_tokens": 2}), JSON, 400, "messages"),
    ("chat-empty-messages", "POST", CHAT, _j({"messages": []}), JSON, 400, "at least one"),
    (
        "chat-image-part",
        "POST",
        CHAT,
        _j(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:,"}}],
                    }
                ]
            }
        ),
        JSON,
        400,
        "not a multimodal model",
    ),
    (
        "chat-tool-choice-unknown-function",
        "POST",
        CHAT,
        _j(
            {
                "messages": MSG,
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            }
        ),
        JSON,
        400,
        "does not match any",
    ),
    (
        "chat-kv-transfer-params",
        "POST",
        CHAT,
        _j({"messages": MSG, "kv_transfer_params": {}}),
        JSON,
        400,
        "set by the server",
    ),
    (
        "chat-max-completion-tokens-zero",
        "POST",
        CHAT,
        _j({"messages": MSG, "max_completion_tokens": 0}),
        JSON,
        400,
        "at least 1",
    ),
    ("wrong-method", "GET", CHAT, b"", {}, 405, "not allowed"),
    ("wrong-method-models", "POST", "/v1/models", b"{}", JSON, 405, "not allowed"),
    ("wrong-path", "POST", "/v1/embeddings", _j({"input": "hi"}), JSON, 404, "no route"),
    (
        "beam-search",
        "POST",
        C,
        _j({"prompt": "hi", "use_beam_search": True}),
        JSON,
        400,
        "beam search is not served",
    ),
    ("tokenize-no-prompt", "POST", "/tokenize", _j({"model": "tiny-llama"}), JSON, 400, "invalid"),
]


@pytest.mark.parametrize(
    ("method", "path", "content", "headers", "status", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_request_is_a_clear_4xx(apps, http, method, path, content, headers, status, words):
    for stream in (False, True):
        body = content
        if stream:
            if b'"stream"' in content or not (content.startswith(b"{") and content.endswith(b"}")):
                continue  # the streamed variant only makes sense for a JSON object body
            body = content[:-1] + b', "stream": true}'
        response = http.request(
            method, f"{apps.disaggregated}{path}", content=body, headers=headers
        )
        assert response.status_code == status, (stream, response.text)
        error = response.json()["error"]
        assert words in error["message"], error
        assert error["code"] == status and error["type"]


def test_app_keeps_serving_after_bad_requests(apps, http):
    for _, method, path, content, headers, _, _ in CASES:
        response = http.request(
            method, f"{apps.disaggregated}{path}", content=content, headers=headers
        )
        assert response.status_code < 500
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": "Kalo mine"})
    assert body["usage"]["completion_tokens"] == 16
