"""Every answer's text against the oracle: the tokenizer's decode of the answer's token ids.

Sampled answers (temperature 1) of prompts in several scripts (Latin, CJK, emoji) and
lengths go through a remote prefill; where its first token is part of a character (the
tiny model's byte-level vocabulary makes that about 1 answer in 8), a continuation on
decode used to stream the whole prompt into the answer. Each answer is checked for that
too: no prompt's marker in any answer.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from load_tests.client.sse import DONE, sse_data_sync
from load_tests.client.text_oracle import echoes, text_matches

WORDS = ["中文", "日本語", "한국어", "😀", "🚀", "naïve", "plain", "words", "ok", "数据", "café"]
REQUESTS = 200


def _prompt(number: int) -> str:
    rng = random.Random(number)
    words = [rng.choice(WORDS) for _ in range(rng.choice((20, 45, 80, 130)))]
    return f"MARKER{number:04d} system secret. " + " ".join(words)


def _answer(http: Any, base: str, number: int) -> tuple[str, list[int], str]:
    body = {
        "prompt": _prompt(number),
        "max_tokens": 12,
        "temperature": 1.0,
        "return_token_ids": True,
    }
    if number % 2:  # half streamed, half not
        text, ids, first_from = "", list[int](), ""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        with http.stream("POST", f"{base}/v1/completions", json=body) as response:
            assert response.status_code == 200, response.read()
            for data in sse_data_sync(response):
                if data == DONE:
                    continue
                event = json.loads(data)
                assert "error" not in event, event
                for choice in event["choices"]:
                    text += choice["text"]
                    ids += choice.get("token_ids") or []
                if event.get("splitserve"):
                    first_from = event["splitserve"].get("first_token_from", "")
        return text, ids, first_from
    response = http.post(f"{base}/v1/completions", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    choice = answer["choices"][0]
    report = answer.get("splitserve") or {}
    return choice["text"], choice["token_ids"], report.get("first_token_from", "")


def test_sampled_answers_text_is_the_decode_of_their_tokens_and_holds_no_prompt(
    apps, http, tokenizer
):
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: _answer(http, apps.disaggregated, n), range(REQUESTS)))
    wrong, echoed, from_prefill = [], [], 0
    for number, (text, ids, first_from) in enumerate(answers):
        from_prefill += first_from == "prefill"
        decoded = tokenizer.decode(ids, skip_special_tokens=True)
        if not text_matches(text, decoded):
            wrong.append((number, text, decoded))
        if "MARKER" in text or "secret" in text or echoes(text, _prompt(number)):
            echoed.append((number, text))
    assert wrong == [], wrong[:3]
    assert echoed == [], echoed[:3]
    assert from_prefill > REQUESTS // 4  # the path under test was taken


def test_a_prompt_of_ids_ending_inside_a_character_is_not_streamed_into_the_answer(
    apps, http, tokenizer
):
    """A client's prompt of token ids that ends with the first byte of a character: vLLM's
    detokenizer, primed with it, streamed the whole prompt's text (vLLM's own server does;
    app.engine.decode_stream). Short and long prompts (prefilled locally and remotely),
    on both apps, streamed and not."""
    lead = tokenizer.convert_tokens_to_ids("ä")  # byte 0xE4: starts a 3-byte character
    assert tokenizer.decode([lead]) == "\ufffd"
    words = tokenizer.encode(
        "MARKER system secret, the words before the cut.", add_special_tokens=False
    )
    cases = []
    for repeat in (1, 60):  # ~12 and ~700 tokens: local and remote prefill
        prompt = [*(words * repeat)[: 700 if repeat > 1 else None], lead]
        for base in (apps.disaggregated, apps.colocated):
            for stream in (False, True):
                cases.append((base, prompt, stream))
    for base, prompt, stream in cases:
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": 12,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        text, ids = "", list[int]()
        if stream:
            body.update(stream=True)
            with http.stream("POST", f"{base}/v1/completions", json=body) as response:
                assert response.status_code == 200, response.read()
                for data in sse_data_sync(response):
                    if data != DONE:
                        for choice in json.loads(data)["choices"]:
                            text += choice["text"]
                            ids += choice.get("token_ids") or []
        else:
            response = http.post(f"{base}/v1/completions", json=body)
            assert response.status_code == 200, response.text
            choice = response.json()["choices"][0]
            text, ids = choice["text"], choice["token_ids"]
        case = (base, len(prompt), stream, text)
        assert len(ids) == 12, case
        assert text_matches(text, tokenizer.decode(ids, skip_special_tokens=True)), case
        assert "MARKER" not in text and "secret" not in text, case
