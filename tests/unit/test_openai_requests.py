import pytest

from app.errors import APIError
from app.openai_requests import RequestParser


@pytest.fixture(scope="module")
def parser(tokenizer):
    return RequestParser(tokenizer, "tiny-llama", max_model_len=64)


def _error(call, body) -> APIError:
    with pytest.raises(APIError) as info:
        call(body)
    return info.value


def test_completion_is_tokenized_once_with_bos(parser, tokenizer):
    parsed = parser.parse_completion({"prompt": "Kalo mine", "max_tokens": 4, "temperature": 0})
    assert parsed.prompt_token_ids[0] == tokenizer.bos_token_id
    assert parsed.sampling_params.max_tokens == 4
    assert parsed.sampling_params.temperature == 0
    assert parsed.kind == "completion" and not parsed.stream


def test_token_id_prompt_and_batch_of_one(parser):
    assert parser.parse_completion({"prompt": [5, 6, 7]}).prompt_token_ids == [5, 6, 7]
    assert parser.parse_completion({"prompt": ["abc"]}).prompt_token_ids


def test_max_tokens_defaults_to_the_room_left(parser):
    parsed = parser.parse_chat(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": None}
    )
    assert parsed.sampling_params.max_tokens == 64 - len(parsed.prompt_token_ids)


def test_chat_applies_the_template(parser, tokenizer):
    parsed = parser.parse_chat(
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert tokenizer.decode(parsed.prompt_token_ids) == "<s><|user|>\nhi</s>\n<|assistant|>\n"
    assert parsed.stream and parsed.include_usage and parsed.kind == "chat"


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        (
            {"prompt": "x", "kv_transfer_params": {"remote_block_ids": [1]}},
            400,
            "kv_transfer_params",
            "set by the server",
        ),
        (
            {"prompt": "x", "vllm_xargs": {"kv_transfer_params": {}}},
            400,
            "vllm_xargs",
            "set by the server",
        ),
        ({"prompt": "x", "model": "gpt-4"}, 404, "model", "does not exist"),
        ({"prompt": "x", "n": 2}, 400, "n", "n must be 1"),
        ({"prompt": "x", "best_of": 3}, 400, "best_of", "not supported"),
        ({"prompt": "x", "echo": True}, 400, "echo", "not supported"),
        ({"prompt": ""}, 400, "prompt", "empty"),
        ({"prompt": []}, 400, "prompt", "empty"),
        ({}, 400, "prompt", "must be provided"),
        ({"prompt": ["a", "b"]}, 400, "prompt", "batched"),
        ({"prompt": [5, 99999]}, 400, "prompt", "out of range"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "at least 1"),
        ({"prompt": "x", "max_tokens": -3}, 400, "max_tokens", "at least 1"),
        ({"prompt": "x", "max_tokens": 10**9}, 400, "max_tokens", "maximum context length"),
        ({"prompt": [5] * 64}, 400, "prompt", "maximum context length"),
        ({"prompt": "x", "max_tokens": "many"}, 400, "max_tokens", "max_tokens"),
        ({"prompt": "x", "temperature": -1}, 400, None, "temperature"),
        ({"prompt": 7}, 400, "prompt", "prompt"),
        (["not", "an", "object"], 400, None, "JSON object"),
        ({"prompt": "x", "frobnicate": 1}, 400, "frobnicate", "unrecognized request argument"),
    ],
)
def test_bad_completion_requests(parser, body, status, param, words):
    error = _error(parser.parse_completion, body)
    assert error.status == status
    assert words in error.message
    if param is not None:
        assert error.param is not None and error.param.startswith(param)
    assert error.body()["error"]["code"] == status


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": []}, "at least one message"),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f"}}],
            },
            "tool calling",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                    }
                ]
            },
            "only text",
        ),
        ({"messages": "hello"}, "messages"),
        (
            {"messages": [{"role": "user", "content": "x"}], "kv_transfer_params": {}},
            "set by the server",
        ),
    ],
)
def test_bad_chat_requests(parser, body, words):
    error = _error(parser.parse_chat, body)
    assert error.status == 400 and words in error.message
