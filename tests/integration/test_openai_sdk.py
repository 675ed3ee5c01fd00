"""The official `openai` SDK streams from the disaggregated app."""

import openai


def _client(apps):
    return openai.OpenAI(base_url=f"{apps.disaggregated}/v1", api_key="unused", max_retries=0)


def test_sdk_streams_a_completion(apps):
    stream = _client(apps).completions.create(
        model="tiny-llama",
        prompt="Kalo mine rusa",
        max_tokens=8,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_sdk_streams_a_chat_completion(apps):
    stream = _client(apps).chat.completions.create(
        model="tiny-llama",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8


def test_sdk_sees_a_clear_error_for_an_unknown_model(apps):
    try:
        _client(apps).completions.create(model="gpt-4", prompt="hi", max_tokens=2)
    except openai.NotFoundError as error:
        assert "gpt-4" in str(error)
    else:
        raise AssertionError("an unknown model must be refused")
