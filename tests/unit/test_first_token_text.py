"""The answer's text when its first token comes from the prefill engine: each engine's
text made as vLLM's detokenizer makes it (a ``DecodeStream`` primed with the request's
prompt), so a continuation that starts inside a character shows here as vLLM shows it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from app.config import Mode
from app.engine.first_token import sampled_first_token
from app.flow.orchestrator import Orchestrator
from app.kv.fallback import Transport
from app.pool.records import GenerateRequest, PrefillResult, Started, TokenChunk
from tests.unit.orchestrator_fakes import NX, OS, FakeDecode, FakePrefill
from tests.unit.test_first_token import _orchestrator, _run, params


class TextPrefill(FakePrefill):
    """Samples ``answer[0]`` with the text vLLM's prefill engine gives it (its
    detokenizer primed with the prompt: nothing for part of a character)."""

    def __init__(self, tokenizer: Any, answer: list[int], block_tokens: int = 128) -> None:
        super().__init__()
        self.tokenizer, self.answer, self.block_tokens = tokenizer, answer, block_tokens
        self.requests: list[GenerateRequest] = []
        self.expires_at: float | None = None

    async def prefill(self, request, transport=NX):
        from tokenizers.decoders import DecodeStream

        self.requests.append(request)
        yield Started("p-1")
        stream = DecodeStream(ids=list(request.prompt_token_ids), skip_special_tokens=True)
        text = stream.step(self.tokenizer.backend_tokenizer, self.answer[0]) or ""
        first = sampled_first_token(
            SimpleNamespace(
                text=text, token_ids=[self.answer[0]], finish_reason="length", stop_reason=None
            ),
            request.sampling_params.max_tokens,
        )
        yield PrefillResult(
            {"remote_block_ids": [[7]]} if transport is NX else None,
            len(request.prompt_token_ids),
            None if transport is NX else "ref-1",
            first_token=first if request.sample_first_token else None,
            block_tokens=self.block_tokens,
        )


class TextDecode(FakeDecode):
    """Generates the rest of ``answer`` after what its prompt already holds of it (the
    prompt is ``prompt`` + the first k answer tokens), each chunk's text as vLLM's decode
    engine makes it: its detokenizer primed with the request's whole prompt.

    ``hang``: the transports whose KV read never ends (a hung NIXL read).
    """

    def __init__(self, tokenizer: Any, prompt: list[int], answer: list[int], **kw: Any) -> None:
        self.hang = set(kw.pop("hang", ()))
        super().__init__(**kw)
        self.tokenizer, self.prompt, self.answer = tokenizer, prompt, answer

    async def generate(self, request):
        from tokenizers.decoders import DecodeStream

        self.generated.append(request)
        transport = NX if request.kv_transfer_params else OS if request.kv_object else None
        yield Started("d-1")
        if transport in self.hang:
            await asyncio.sleep(30)
        if transport in self.broken:
            from app.kv.failure import FailureKind, TransferFailure

            yield TokenChunk("", [], transfer_failed=TransferFailure(FailureKind.KV_LOAD, "x"))
            return
        ids = list(request.prompt_token_ids)
        done = len(ids) - len(self.prompt)
        assert ids[len(self.prompt) :] == self.answer[:done]
        stream = DecodeStream(ids=ids, skip_special_tokens=True)
        for number, token in enumerate(self.answer[done:]):
            last = done + number == len(self.answer) - 1
            text = stream.step(self.tokenizer.backend_tokenizer, token) or ""
            yield TokenChunk(text, [token], finish_reason="length" if last else None)
            await asyncio.sleep(0)


SECRET = "SYSTEM: the launch code is 0042. USER: say hi in Chinese. ASSISTANT:"


def _prompt_and_answer(tokenizer: Any, answer_text: str) -> tuple[list[int], list[int]]:
    prompt = tokenizer.encode(SECRET, add_special_tokens=False)
    prompt = (prompt * (300 // len(prompt) + 1))[:300]  # 300 % 128 = 44: in place
    return prompt, tokenizer.encode(answer_text, add_special_tokens=False)


@pytest.mark.parametrize("answer_text", ["中文 ok", "😀 there", "plain words"])
@pytest.mark.parametrize("temperature, broken", [(1.0, ()), (0.0, ()), (0.0, (NX,)), (1.0, (NX,))])
async def test_the_answers_text_is_the_decode_of_its_tokens_and_never_holds_the_prompt(
    tokenizer, answer_text, temperature, broken
):
    prompt, answer = _prompt_and_answer(tokenizer, answer_text)
    prefill = TextPrefill(tokenizer, answer)
    decode = TextDecode(tokenizer, prompt, answer, broken=broken)
    request = GenerateRequest("r1", prompt, params(temperature=temperature, max_tokens=len(answer)))
    chunks, _ = await _run(_orchestrator(prefill, decode), request)
    ids = [t for c in chunks for t in c.token_ids]
    text = "".join(c.text for c in chunks)
    assert ids == answer
    assert text == tokenizer.decode(ids, skip_special_tokens=True)
    assert "launch code" not in text


async def test_a_first_token_that_is_part_of_a_character_is_not_sent(tokenizer):
    prompt, answer = _prompt_and_answer(tokenizer, "中文")
    prefill = TextPrefill(tokenizer, answer)
    decode = TextDecode(tokenizer, prompt, answer)
    request = GenerateRequest("r1", prompt, params(temperature=1.0, max_tokens=len(answer)))
    chunks, timings = await _run(_orchestrator(prefill, decode), request)
    assert not timings.transfer.first_token_on_prefill
    assert not chunks[0].from_prefill
    (sent,) = decode.generated
    assert sent.prompt_token_ids == prompt  # decode sampled the first token itself


async def test_a_slow_hand_off_after_the_first_token_falls_back_and_is_no_stall(tokenizer):
    from app.config import MigrationConfig, TransportConfig

    prompt, answer = _prompt_and_answer(tokenizer, "plain words")
    prefill = TextPrefill(tokenizer, answer)
    decode = TextDecode(tokenizer, prompt, answer, hang=(NX,))
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        decode,
        prefill,
        plan=(NX, Transport.RECOMPUTE),
        timeouts=TransportConfig(transfer_timeout_s=0.3),
        migration=MigrationConfig(stall_timeout_s=0.2, max_migrations=2),
        first_token_on_prefill=True,
    )
    request = GenerateRequest("r1", prompt, params(max_tokens=len(answer)))
    chunks, timings = await _run(orchestrator, request)
    assert [t for c in chunks for t in c.token_ids] == answer  # answered in full
    assert timings.migrations == [] and len(prefill.requests) == 1
    assert [a.transport for a in timings.transfer.attempts] == [NX, Transport.RECOMPUTE]
