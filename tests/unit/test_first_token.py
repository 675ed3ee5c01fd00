"""The answer's first token from the prefill engine (app.flow.first_token) as the
orchestrator streams it: greedy answers repeat it on decode, sampled ones continue from
it, and the prefill's blocks are freed wherever no decode will read them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from app.config import Mode
from app.flow.first_token import (
    Diverged,
    continues_in_place,
    first_token_allowed,
    without_repeat,
)
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.pool.records import GenerateRequest, PrefillResult, Started, TokenChunk
from tests.unit.orchestrator_fakes import CHAIN, NX, OS, FakeDecode, FakePrefill

PROMPT = list(range(10, 20))  # 10 tokens; blocks of 4: the 11th token fits in the last


def params(**changes: Any) -> Any:
    base: dict[str, Any] = dict(
        n=1,
        max_tokens=8,
        min_tokens=0,
        seed=None,
        temperature=0.0,
        logprobs=None,
        prompt_logprobs=None,
        stop=[],
        presence_penalty=0.0,
        frequency_penalty=0.0,
        repetition_penalty=1.0,
        structured_outputs=None,
        bad_words=[],
    )

    class Params(SimpleNamespace):
        def clone(self) -> Params:
            return Params(**vars(self))

    return Params(**{**base, **changes})


class SamplingPrefill(FakePrefill):
    """Samples the first token when asked (token 1, "a"; ``finish`` its finish reason)."""

    def __init__(self, finish: str | None = None, block_tokens: int = 4) -> None:
        super().__init__()
        self.requests: list[GenerateRequest] = []
        self.finish = finish
        self.block_tokens = block_tokens

    async def prefill(self, request, transport=NX):
        self.requests.append(request)
        async for item in super().prefill(request, transport):
            if isinstance(item, PrefillResult) and request.sample_first_token:
                first = TokenChunk("a", [1], finish_reason=self.finish)
                item = PrefillResult(
                    item.kv_transfer_params,
                    len(request.prompt_token_ids),
                    item.kv_object,
                    first_token=first,
                    block_tokens=self.block_tokens,
                )
            yield item


class ScriptedDecode(FakeDecode):
    """Streams ``tokens`` (id, text) one per chunk, after ``Started``."""

    def __init__(self, tokens: list[tuple[int, str]], broken=()) -> None:
        super().__init__(broken=broken)
        self.tokens = tokens

    async def generate(self, request):
        self.generated.append(request)
        transport = NX if request.kv_transfer_params else OS if request.kv_object else None
        yield Started("d-1")
        if transport in self.broken:
            from app.kv.failure import FailureKind, TransferFailure

            yield TokenChunk("", [], transfer_failed=TransferFailure(FailureKind.KV_LOAD, "x"))
            return
        for number, (token, text) in enumerate(self.tokens):
            last = number == len(self.tokens) - 1
            yield TokenChunk(text, [token], finish_reason="length" if last else None)


def _orchestrator(prefill, decode, plan=CHAIN) -> Orchestrator:
    return Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=plan, first_token_on_prefill=True)


def _request(**changes: Any) -> GenerateRequest:
    return GenerateRequest("r1", PROMPT, params(**changes))


async def _run(orchestrator, request) -> tuple[list[TokenChunk], RequestTimings]:
    timings = RequestTimings()
    return [c async for c in orchestrator.run(request, timings)], timings


async def test_greedy_sends_prefills_token_then_drops_decodes_repeat_of_it():
    prefill, decode = SamplingPrefill(), ScriptedDecode([(1, "a"), (2, "b"), (3, "c")])
    chunks, timings = await _run(_orchestrator(prefill, decode), _request())
    assert [c.text for c in chunks] == ["a", "b", "c"]
    assert [t for c in chunks for t in c.token_ids] == [1, 2, 3]
    assert prefill.requests[0].sample_first_token
    (sent,) = decode.generated  # decode computed the whole answer, as before
    assert sent.prompt_token_ids == PROMPT and sent.kv_transfer_params is not None
    assert timings.transfer.first_token_on_prefill


async def test_the_client_gets_the_first_token_before_decode_is_asked():
    prefill, decode = SamplingPrefill(), ScriptedDecode([(1, "a"), (2, "b")])
    chunks = _orchestrator(prefill, decode).run(_request(), RequestTimings())
    first = await anext(aiter(chunks))
    assert first.text == "a" and decode.generated == []
    await chunks.aclose()  # type: ignore[attr-defined]


async def test_a_client_gone_after_the_first_token_frees_the_prefills_blocks():
    prefill, decode = SamplingPrefill(), ScriptedDecode([(1, "a"), (2, "b")])
    chunks = _orchestrator(prefill, decode).run(_request(), RequestTimings())
    await anext(aiter(chunks))
    await chunks.aclose()  # type: ignore[attr-defined]
    await asyncio.sleep(0)  # the release runs as a task
    assert len(prefill.released) == 1 and decode.generated == []


@pytest.mark.parametrize("finish", ["stop", "length"])
async def test_an_answer_that_ends_at_its_first_token_never_reaches_decode(finish):
    prefill, decode = SamplingPrefill(finish=finish), ScriptedDecode([(1, "a")])
    chunks, _ = await _run(_orchestrator(prefill, decode), _request(max_tokens=1))
    assert [(c.text, c.finish_reason) for c in chunks] == [("a", finish)]
    await asyncio.sleep(0)
    assert decode.generated == [] and len(prefill.released) == 1


async def test_sampled_continues_from_prompt_and_token_where_it_fits_the_last_block():
    prefill, decode = SamplingPrefill(block_tokens=4), ScriptedDecode([(5, "x"), (6, "y")])
    chunks, _ = await _run(_orchestrator(prefill, decode), _request(temperature=0.8))
    assert [c.text for c in chunks] == ["a", "x", "y"]
    (sent,) = decode.generated
    assert sent.prompt_token_ids == [*PROMPT, 1]
    assert sent.sampling_params.max_tokens == 7 and sent.kv_transfer_params is not None
    assert sent.origin_id == "r1"


async def test_sampled_leaves_the_token_unused_where_it_would_start_or_end_a_block():
    for block_tokens in (5, 11):  # 10 % 5 == 0: a new block; 10 % 11 == 10: ends one
        prefill, decode = (
            SamplingPrefill(block_tokens=block_tokens),
            ScriptedDecode([(5, "x"), (6, "y")]),
        )
        chunks, timings = await _run(_orchestrator(prefill, decode), _request(temperature=0.8))
        assert [c.text for c in chunks] == ["x", "y"]
        assert decode.generated[0].prompt_token_ids == PROMPT
        assert not timings.transfer.first_token_on_prefill


async def test_decode_sampling_another_first_token_goes_on_from_the_one_sent():
    prefill, decode = SamplingPrefill(), ScriptedDecode([(9, "z"), (2, "b")])
    chunks, _ = await _run(_orchestrator(prefill, decode), _request())
    assert [c.text for c in chunks] == ["a", "z", "b"]  # the continuation's, from the fake
    first, second = decode.generated
    assert first.kv_transfer_params is not None
    # The continuation: prompt + the token sent, no KV (decode caches the prompt now).
    assert second.prompt_token_ids == [*PROMPT, 1] and second.kv_transfer_params is None


async def test_a_failed_transfer_after_the_first_token_falls_back_from_prompt_and_token():
    prefill = SamplingPrefill()
    decode = ScriptedDecode([(2, "b"), (3, "c")], broken={NX})
    chunks, timings = await _run(_orchestrator(prefill, decode), _request())
    assert [c.text for c in chunks] == ["a", "b", "c"]
    assert [(r.prompt_token_ids, r.sample_first_token) for r in prefill.requests] == [
        (PROMPT, True),
        ([*PROMPT, 1], False),
    ]
    assert decode.generated[1].kv_object is not None  # the object store served it
    assert [a.transport for a in timings.transfer.attempts] == [NX, OS]


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 1},
        {"logprobs": 2},
        {"prompt_logprobs": 0},
        {"stop": ["x"]},
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"repetition_penalty": 1.2},
        {"structured_outputs": object()},
        {"n": 2},
    ],
)
async def test_sampling_a_continuation_could_tell_apart_keeps_the_first_token_on_decode(change):
    assert not first_token_allowed(params(**change))
    prefill, decode = SamplingPrefill(), ScriptedDecode([(1, "a"), (2, "b")])
    chunks, _ = await _run(_orchestrator(prefill, decode), _request(**change))
    assert [c.text for c in chunks] == ["a", "b"]
    assert not prefill.requests[0].sample_first_token


async def test_off_by_config_nothing_is_asked():
    prefill, decode = SamplingPrefill(), ScriptedDecode([(1, "a"), (2, "b")])
    orchestrator = Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN)
    await _run(orchestrator, _request())
    assert not prefill.requests[0].sample_first_token


def test_a_repeat_is_dropped_with_its_text_and_another_token_is_named():
    sent = TokenChunk("a", [1])
    assert without_repeat(TokenChunk("a", [1]), sent) is None
    rest = without_repeat(TokenChunk("ab", [1, 2], finish_reason="length"), sent)
    assert rest is not None and (rest.text, rest.token_ids) == ("b", [2])
    end = without_repeat(TokenChunk("a", [1], finish_reason="stop"), sent)
    assert end is not None and end.token_ids == [] and end.finish_reason == "stop"
    with pytest.raises(Diverged, match=r"\[9\]"):
        without_repeat(TokenChunk("z", [9]), sent)


def test_the_token_continues_in_place_only_inside_the_prompts_last_block():
    assert continues_in_place(10, 4)  # positions 8, 9 used; 10 joins them
    assert not continues_in_place(8, 4)  # would start a block
    assert not continues_in_place(11, 4)  # would complete one
    assert not continues_in_place(10, 0)  # block size unknown


async def test_the_read_deadline_is_set_when_the_prefill_ends_not_when_the_client_reads(
    monkeypatch,
):
    from app.config import TransportConfig
    from app.flow import kv_lease

    clock = [1000.0]
    monkeypatch.setattr("app.flow.kv_lease.time.time", lambda: clock[0])
    expected = kv_lease.kv_expiry(TransportConfig().kv_lease_s)  # at the prefill's end
    prefill, decode = SamplingPrefill(), ScriptedDecode([(1, "a"), (2, "b")])
    chunks = aiter(_orchestrator(prefill, decode).run(_request(), RequestTimings()))
    await anext(chunks)  # the first token, from prefill
    clock[0] += 3.0  # a slow client takes 3 s to read it
    assert [c async for c in chunks]
    (sent,) = decode.generated
    assert sent.kv_expires_at == expected


@pytest.mark.parametrize(
    ("certain", "released"),
    [
        (False, 0),  # only unreachable: its read may still run, only the lease frees them
        (True, 1),  # surely dead: no read runs, they are freed at once
    ],
)
async def test_the_prefills_blocks_are_freed_early_only_when_the_replica_surely_died(
    certain, released
):
    from app.flow.migration import LostCause, ReplicaLost

    class Lost(ScriptedDecode):
        async def generate(self, request):
            self.generated.append(request)
            yield Started("d-1")
            raise ReplicaLost(LostCause.REPLICA_DIED, "gone", certain=certain)

    prefill, decode = SamplingPrefill(), Lost([])
    orchestrator = _orchestrator(prefill, decode)
    orchestrator.migration = orchestrator.migration.model_copy(update={"enabled": False})
    with pytest.raises(ReplicaLost):
        await _run(orchestrator, _request(temperature=1.0))
    await asyncio.sleep(0)
    assert len(prefill.released) == released


async def test_a_dead_decode_engine_after_prefills_token_is_retried_not_a_move():
    """The decode replica's engine is dead for a while: each continuation's prefill sends
    a token, then decode fails before its first chunk. That never reached a live decode
    engine: it is retried until decode serves, and spends no move."""
    from app.config import MigrationConfig
    from app.flow.migration import LostCause, ReplicaLost

    class DeadForAWhile(ScriptedDecode):
        def __init__(self, dead_calls: int) -> None:
            super().__init__([(2, "b"), (3, "c")])
            self.dead_calls = dead_calls

        async def generate(self, request):
            if len(self.generated) < self.dead_calls:
                self.generated.append(request)
                yield Started("d-1")
                raise ReplicaLost(LostCause.ENGINE_DIED, "EngineDeadError")
            async for item in super().generate(request):
                yield item

    prefill, decode = SamplingPrefill(), DeadForAWhile(dead_calls=3)
    orchestrator = _orchestrator(prefill, decode)
    orchestrator.migration = MigrationConfig(
        max_migrations=1, retry_interval_s=0.01, resume_timeout_s=5
    )
    chunks, timings = await _run(orchestrator, _request(max_tokens=8))
    assert chunks and chunks[-1].finish_reason is not None
    assert timings.migrations == []
