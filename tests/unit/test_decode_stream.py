"""vLLM's incremental detokenizer on a prompt of ids that ends inside a character: with
:mod:`app.engine.decode_stream` installed, the answer's text is the decode of its own ids
and holds none of the prompt's (``tokenizers``' own stream returned the whole prompt)."""

from typing import Any

import pytest
import tokenizers.decoders
from vllm import SamplingParams
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.engine.detokenizer import IncrementalDetokenizer

from app.engine import decode_stream


@pytest.fixture(scope="module")
def vllm_tokenizer(tiny_model_path: str) -> Any:
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(tiny_model_path)


def _answer_text(tokenizer: Any, prompt: list[int], answer: list[int]) -> str:
    request = EngineCoreRequest(
        request_id="r",
        prompt_token_ids=prompt,
        mm_features=None,
        sampling_params=SamplingParams(max_tokens=len(answer)),
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )
    detokenizer = IncrementalDetokenizer.from_new_request(tokenizer, request)
    for token in answer:
        detokenizer.update([token], False)
    return str(getattr(detokenizer, "output_text", ""))


def _prompt_ending_inside_a_character(tokenizer: Any) -> list[int]:
    lead = tokenizer.convert_tokens_to_ids("ä")  # byte 0xE4: starts a 3-byte character
    prompt = [*tokenizer.encode("MARKER the system prompt", add_special_tokens=False), lead]
    assert tokenizer.decode(prompt).endswith("\ufffd")
    return prompt


@pytest.fixture
def original_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenizers.decoders, "DecodeStream", decode_stream._ORIGINAL)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenizers.decoders, "DecodeStream", decode_stream._ORIGINAL)
    decode_stream.install()


def test_without_the_fix_vllm_streams_the_prompt_into_the_answer(vllm_tokenizer, original_stream):
    """The defect, as vLLM and tokenizers ship it: if this fails, the fix may go."""
    prompt = _prompt_ending_inside_a_character(vllm_tokenizer)
    answer = vllm_tokenizer.encode(" a plain answer", add_special_tokens=False)
    assert "MARKER" in _answer_text(vllm_tokenizer, prompt, answer)


def test_the_answer_is_the_decode_of_its_own_ids(vllm_tokenizer, installed):
    prompt = _prompt_ending_inside_a_character(vllm_tokenizer)
    answer = vllm_tokenizer.encode(" a plain answer", add_special_tokens=False)
    text = _answer_text(vllm_tokenizer, prompt, answer)
    assert "MARKER" not in text
    assert text == vllm_tokenizer.decode(answer)


def test_a_byte_that_completes_the_prompts_character_reads_as_the_decode_does(
    vllm_tokenizer, installed
):
    prompt = _prompt_ending_inside_a_character(vllm_tokenizer)
    # 中 is E4 B8 AD: the prompt holds E4; the answer starts with B8 AD (byte-level BPE
    # names those bytes U+00B8 and U+0143), then words
    rest = [vllm_tokenizer.convert_tokens_to_ids(c) for c in ("\u00b8", "\u0143")]
    answer = [*rest, *vllm_tokenizer.encode(" then words", add_special_tokens=False)]
    text = _answer_text(vllm_tokenizer, prompt, answer)
    assert "MARKER" not in text
    assert text == vllm_tokenizer.decode(answer)


def test_a_prompt_of_whole_characters_primes_the_stream_unchanged(vllm_tokenizer, installed):
    prompt = vllm_tokenizer.encode("中文 and words", add_special_tokens=False)
    assert decode_stream.whole_characters(vllm_tokenizer, prompt, True) == prompt
    cut = _prompt_ending_inside_a_character(vllm_tokenizer)
    assert decode_stream.whole_characters(vllm_tokenizer, cut, True) == cut[:-1]
    answer = vllm_tokenizer.encode(" more", add_special_tokens=False)
    assert _answer_text(vllm_tokenizer, prompt, answer) == vllm_tokenizer.decode(answer)
