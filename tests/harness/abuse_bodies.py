"""Request bodies a hostile or broken client sends: malformed JSON of many shapes, and
well-formed JSON whose fields have the wrong type or shape (the unit and the integration
abuse suites send the same ones)."""

from __future__ import annotations

from typing import Any

RAW_BODIES = [
    b"[" * 5000,
    b"{" * 5000,
    b'{"max_tokens": ' + b"9" * 5000 + b"}",
    b"null",
    b"42",
    b'"text"',
    b"[]",
    b"{}",
    b'{"prompt": "hi"',
    b'{"prompt": "\\ud800"}',
    b"\x00\x01\x02",
    b'{"prompt": NaN}',
    b'{"prompt": "hi", "max_tokens": Infinity}',
]

BAD_CHATS: list[Any] = [
    {"messages": None},
    {"messages": 5},
    {"messages": "hi"},
    {"messages": [None]},
    {"messages": [5]},
    {"messages": [{}]},
    {"messages": [{"role": None, "content": "hi"}]},
    {"messages": [{"role": "user"}]},
    {"messages": [{"role": "user", "content": 5}]},
    {"messages": [{"role": "user", "content": [5]}]},
    {"messages": [{"role": "user", "content": [{"type": "nope"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
    {"messages": [{"role": "system", "content": {"a": 1}}]},
    {"messages": [{"role": "tool", "content": "x"}]},
    {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function"}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
    },
    {"messages": [{"role": "user", "content": "hi"}], "tools": 5},
    {"messages": [{"role": "user", "content": "hi"}], "tools": [None]},
    {"messages": [{"role": "user", "content": "hi"}], "tool_choice": 5},
    {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}},
    {"messages": [{"role": "user", "content": "hi"}], "response_format": 5},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"},
    {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
    {"messages": [{"role": "user", "content": "hi"}], "stop": 5},
    {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"x": 1}},
    {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"999999999": 1}},
    {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 99, "logprobs": True},
    {"messages": [{"role": "user", "content": "hi"}], "n": 0},
    {"messages": [{"role": "user", "content": "hi"}], "n": "2"},
    {"messages": [{"role": "user", "content": "hi"}], "stream_options": 5},
    {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": 5},
    {"messages": [{"role": "user", "content": "hi"}], "structured_outputs": {"json": "{"}},
]

BAD_COMPLETIONS: list[Any] = [
    {"prompt": None},
    {"prompt": 5},
    {"prompt": [None]},
    {"prompt": [[None]]},
    {"prompt": []},
    {"prompt": [[]]},
    {"prompt": [-1]},
    {"prompt": [10**12]},
    {"prompt": "hi", "max_tokens": 10**9},
    {"prompt": "hi", "logprobs": 1000},
    {"prompt": "hi", "prompt_logprobs": 1000},
    {"prompt": "hi", "suffix": 5},
    {"prompt": "hi", "echo": "yes"},
    {"prompt": "hi", "best_of": 5},
    {"prompt": "hi", "seed": -1},
    {"prompt": "hi", "seed": 10**30},
    {"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]},
    {"prompt": "hi", "allowed_token_ids": [-5]},
    {"prompt": "hi", "bad_words": 5},
    {"prompt": "hi" * 5000},
]
