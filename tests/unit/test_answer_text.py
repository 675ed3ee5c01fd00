"""After a migration the ingress detokenizes the whole answer (vLLM's own incremental
detokenizer, the tiny model's byte-level tokenizer): a character or a stop string whose
bytes span the cut comes out as in an uninterrupted run."""

from typing import Any

import pytest
from vllm import SamplingParams
from vllm.v1.engine import EngineCoreRequest

from app.api.answer_text import VllmAnswerText
from app.config import MigrationConfig, Mode
from app.flow.migration import LostCause, ReplicaLost
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, Started, TokenChunk


@pytest.fixture(scope="module")
def vllm_tokenizer(tiny_model_path: str) -> Any:
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(tiny_model_path)


def _engine_request(prompt: list[int], params: SamplingParams) -> EngineCoreRequest:
    return EngineCoreRequest(
        request_id="r",
        prompt_token_ids=prompt,
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )


class Engine(PoolClient):
    """A decode pool that streams a fixed answer one token per chunk, its text made by
    vLLM's detokenizer primed with the request's prompt, as an engine's is; the first
    call dies after ``die_after`` tokens."""

    def __init__(self, tokenizer: Any, prompt: list[int], answer: list[int], die_after: int):
        self.tokenizer, self.prompt, self.answer = tokenizer, prompt, answer
        self.plan = [die_after, None]

    async def prefill(self, request, transport=None):
        raise AssertionError("colocated")
        yield

    async def generate(self, request):
        die_after = self.plan.pop(0)
        yield Started("engine")
        done = len(request.prompt_token_ids) - len(self.prompt)
        text = VllmAnswerText(
            self.tokenizer, _engine_request(request.prompt_token_ids, request.sampling_params)
        )
        sent = 0
        for i, token in enumerate(self.answer[done:]):
            if i == die_after:
                raise ReplicaLost(LostCause.REPLICA_DIED, "killed")
            stop = text.add([token], stop_terminated=False)
            last = stop is not None or done + i == len(self.answer) - 1
            end = max(sent, len(text.text) - (0 if last else text.held_back))
            yield TokenChunk(
                text.text[sent:end],
                [token],
                finish_reason=("stop" if stop else "length") if last else None,
                stop_reason=stop,
            )
            sent = end
            if last:
                return


async def _stream(tokenizer, prompt, answer, cut, params, mend=True):
    engine = Engine(tokenizer, prompt, answer, die_after=cut)
    orchestrator = Orchestrator(Mode.COLOCATED, engine, migration=MigrationConfig())
    request = GenerateRequest("r", list(prompt), params)
    timings = RequestTimings()

    def answer_text() -> VllmAnswerText:
        return VllmAnswerText(tokenizer, _engine_request(list(prompt), params))

    chunks = [c async for c in orchestrator.run(request, timings, answer_text if mend else None)]
    assert len(timings.migrations) == 1
    return chunks


def _split(tokenizer, text: str) -> tuple[list[int], int]:
    """``text``'s tokens and the index just after the first byte of "é" (the cut)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    first_byte = tokenizer.convert_tokens_to_ids("Ã")  # 0xC3, "é" is C3 A9
    return ids, ids.index(first_byte) + 1


async def test_a_character_spanning_the_cut_is_whole(vllm_tokenizer):
    prompt = vllm_tokenizer.encode("hello world", add_special_tokens=False)
    answer, cut = _split(vllm_tokenizer, " un café noir, merci")
    params = SamplingParams(max_tokens=len(answer))
    chunks = await _stream(vllm_tokenizer, prompt, answer, cut, params)
    assert [t for c in chunks for t in c.token_ids] == answer
    assert "".join(c.text for c in chunks) == " un café noir, merci"
    # What the engine alone gives: the continuation's detokenizer starts at the cut.
    engine_only = await _stream(vllm_tokenizer, prompt, answer, cut, params, mend=False)
    assert "".join(c.text for c in engine_only) != " un café noir, merci"


async def test_a_stop_string_spanning_the_cut_ends_the_answer(vllm_tokenizer):
    prompt = vllm_tokenizer.encode("hello world", add_special_tokens=False)
    answer, cut = _split(vllm_tokenizer, " un café noir, merci")
    params = SamplingParams(max_tokens=len(answer), stop=["fé n"])
    chunks = await _stream(vllm_tokenizer, prompt, answer, cut, params)
    assert "".join(c.text for c in chunks) == " un ca"
    assert (chunks[-1].finish_reason, chunks[-1].stop_reason) == ("stop", "fé n")
    # Tokens end with the one completing the stop string, as vLLM's engine cuts them.
    tokens = [t for c in chunks for t in c.token_ids]
    assert vllm_tokenizer.decode(tokens).endswith("fé n")
