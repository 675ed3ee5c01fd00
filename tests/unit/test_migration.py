"""Request migration over fake decode pools: the stream goes on where it was lost."""

import asyncio

import pytest
from vllm import SamplingParams

from app.config import MigrationConfig, Mode
from app.flow.migration import LostCause, ReplicaLost, StallWatch, continuation
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.pool.client import PoolBusy, PoolClient
from app.pool.records import GenerateRequest, Started, TokenChunk

PROMPT = [5, 6, 7, 8]


def token_at(position: int) -> int:
    """The fake model's greedy choice: a function of the position only."""
    return 100 + position


class Decode(PoolClient):
    """Greedy fake decode pool; call k dies after ``plan[k]`` tokens (None: lives)."""

    def __init__(self, plan=(None,), cause=LostCause.REPLICA_DIED, stall=False):
        self.plan = list(plan)
        self.cause = cause
        self.stall = stall
        self.requests: list[GenerateRequest] = []
        self.closed = 0

    async def prefill(self, request, transport=None):
        raise AssertionError("colocated")
        yield

    async def generate(self, request):
        self.requests.append(request)
        die_after = self.plan.pop(0) if self.plan else None
        try:
            yield Started(f"d-{len(self.requests)}")
            params = request.sampling_params
            start = len(request.prompt_token_ids)
            for i in range(params.max_tokens):
                if die_after is not None and i == die_after:
                    if self.stall:
                        await asyncio.sleep(3600)
                    raise ReplicaLost(self.cause, "killed")
                last = i == params.max_tokens - 1
                yield TokenChunk(
                    f"t{token_at(start + i)}",
                    [token_at(start + i)],
                    finish_reason="length" if last else None,
                    cumulative_logprob=-1.0 * (i + 1),
                )
        finally:
            self.closed += 1


def _request(max_tokens=10, **params):
    return GenerateRequest("r", list(PROMPT), SamplingParams(max_tokens=max_tokens, **params))


async def _run(decode, request=None, **config):
    orchestrator = Orchestrator(Mode.COLOCATED, decode, migration=MigrationConfig(**config))
    timings = RequestTimings()
    chunks = [c async for c in orchestrator.run(request or _request(), timings)]
    return chunks, timings


def _tokens(chunks):
    return [t for c in chunks for t in c.token_ids]


UNINTERRUPTED = [token_at(len(PROMPT) + i) for i in range(10)]


async def test_a_stream_lost_mid_way_goes_on_with_the_same_tokens():
    decode = Decode(plan=[3, None])
    chunks, timings = await _run(decode)
    assert _tokens(chunks) == UNINTERRUPTED
    assert chunks[-1].finish_reason == "length"
    [migration] = timings.migrations
    assert (migration.cause, migration.tokens_sent, migration.engine_id) == (
        LostCause.REPLICA_DIED,
        3,
        "d-1",
    )
    resumed = decode.requests[1]
    assert resumed.request_id == "r.m1"
    assert resumed.prompt_token_ids == PROMPT + UNINTERRUPTED[:3]
    assert resumed.sampling_params.max_tokens == 7
    assert decode.closed == 2


async def test_cumulative_logprob_continues_across_the_move():
    chunks, _ = await _run(Decode(plan=[3, None]))
    assert [c.cumulative_logprob for c in chunks] == [-1.0 * (i + 1) for i in range(10)]


async def test_min_tokens_shrink_and_prompt_logprobs_are_not_asked_again():
    request = _request(min_tokens=5, prompt_logprobs=1)
    resumed = continuation(request, UNINTERRUPTED[:3], 1)
    assert resumed.sampling_params.min_tokens == 2
    assert resumed.sampling_params.prompt_logprobs is None
    assert request.sampling_params.min_tokens == 5  # the original is untouched


async def test_migration_off_surfaces_the_loss():
    with pytest.raises(ReplicaLost, match="replica_died"):
        await _run(Decode(plan=[3, None]), enabled=False)


async def test_at_most_max_migrations_then_the_loss_is_raised():
    with pytest.raises(ReplicaLost):
        await _run(Decode(plan=[2, 2, 2, None]), max_migrations=2)
    chunks, timings = await _run(Decode(plan=[2, 2, None]), max_migrations=2)
    assert _tokens(chunks) == UNINTERRUPTED
    assert [m.tokens_sent for m in timings.migrations] == [2, 4]


async def test_a_send_no_live_replica_took_is_retried_without_counting():
    # The first two sends reach a dead engine before any token: retries, not migrations.
    decode = Decode(plan=[0, 0, None], cause=LostCause.ENGINE_DIED)
    chunks, timings = await _run(decode, retry_interval_s=0.01)
    assert _tokens(chunks) == UNINTERRUPTED
    assert timings.migrations == []
    assert [r.request_id for r in decode.requests] == ["r", "r.r1", "r.r2"]


async def test_no_live_replica_within_the_resume_timeout_is_the_error():
    with pytest.raises(ReplicaLost, match="engine_died"):
        await _run(
            Decode(plan=[0] * 100, cause=LostCause.ENGINE_DIED),
            retry_interval_s=0.01,
            resume_timeout_s=0.1,
        )


async def test_a_stalled_stream_is_closed_and_migrated():
    decode = Decode(plan=[4, None], stall=True)
    chunks, timings = await asyncio.wait_for(_run(decode, stall_timeout_s=0.1), 5)
    assert _tokens(chunks) == UNINTERRUPTED
    assert [m.cause for m in timings.migrations] == [LostCause.STREAM_STALLED]
    assert decode.closed == 2  # the stalled call was closed, so its replica aborts it


async def test_a_stream_lost_after_its_last_token_ends_with_length():
    class LostAtEnd(Decode):
        async def generate(self, request):
            yield Started("d")
            for i in range(request.sampling_params.max_tokens):
                yield TokenChunk("x", [token_at(i)])  # the final chunk never comes
            raise ReplicaLost(LostCause.REPLICA_DIED, "killed")

    chunks, timings = await _run(LostAtEnd(), _request(max_tokens=4))
    assert len(_tokens(chunks)) == 4 and chunks[-1].finish_reason == "length"
    assert len(timings.migrations) == 1


async def test_other_failures_are_not_migrated():
    class Broken(Decode):
        async def generate(self, request):
            self.requests.append(request)
            yield Started("d")
            yield TokenChunk("x", [1])
            raise ValueError("a bug, not a lost replica")

    decode = Broken()
    with pytest.raises(ValueError):
        await _run(decode)
    assert len(decode.requests) == 1


def test_ray_and_vllm_failures_that_mean_a_lost_replica():
    from ray import exceptions
    from vllm.v1.engine.exceptions import EngineDeadError

    from deployments.pool_client import lost_cause

    class Wrapped(Exception):  # as Ray's RayTaskError carries the remote error
        def __init__(self, cause):
            super().__init__("remote")
            self.cause = cause

    assert lost_cause(exceptions.ActorDiedError()) is LostCause.REPLICA_DIED
    assert lost_cause(Wrapped(EngineDeadError())) is LostCause.ENGINE_DIED
    try:
        try:
            raise EngineDeadError()
        except EngineDeadError as inner:
            raise RuntimeError("generate failed") from inner
    except RuntimeError as outer:
        assert lost_cause(outer) is LostCause.ENGINE_DIED
    assert lost_cause(ValueError("bad sampling params")) is None
    assert lost_cause(Wrapped(ValueError("a bug"))) is None


async def _chunks(gaps_s):
    for number, gap in enumerate(gaps_s):
        await asyncio.sleep(gap)
        yield TokenChunk("x", [number])


async def test_the_stall_watch_times_the_replica_not_the_client():
    # Each wait on the replica is short; the client takes longer than the limit between
    # chunks. Only the replica's waits count: no stall.
    watch = StallWatch(0.05)
    chunks = aiter(_chunks([0.01] * 4))
    got = []
    for _ in range(4):
        got.append(await watch.next(chunks))
        await asyncio.sleep(0.08)  # a slow client
    watch.stop()
    assert [c.token_ids for c in got] == [[0], [1], [2], [3]]


async def test_the_stall_watch_fails_a_wait_past_the_limit_once():
    watch = StallWatch(0.05)
    chunks = aiter(_chunks([0.0, 0.0, 1.0]))
    await watch.next(chunks)
    await watch.next(chunks)
    with pytest.raises(ReplicaLost, match="stream_stalled"):
        await watch.next(chunks)
    watch.stop()
    task = asyncio.current_task()
    assert task is not None and not task.cancelling()  # the watchdog's cancel is taken back


async def test_the_stall_watch_sets_one_timer_for_a_stream_of_fast_chunks(monkeypatch):
    loop = asyncio.get_running_loop()
    timers = []
    call_at = loop.call_at

    def counted(*args):
        timers.append(args)
        return call_at(*args)

    monkeypatch.setattr(loop, "call_at", counted)
    watch = StallWatch(10.0)
    chunks = aiter(_chunks([0.0] * 200))
    for _ in range(200):
        await watch.next(chunks)
    watch.stop()
    assert len(timers) == 1  # asyncio.timeout per chunk set 200


async def test_a_cancel_from_elsewhere_is_not_a_stall():
    watch = StallWatch(10.0)
    task = asyncio.ensure_future(watch.next(aiter(_chunks([5.0]))))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    watch.stop()


class Busy(Decode):
    """Decode pool whose queue is full for the sends numbered in ``busy`` (0-based)."""

    def __init__(self, busy, plan=(None,)):
        super().__init__(plan=plan)
        self.busy = set(busy)
        self.sends = 0

    async def generate(self, request):
        send, self.sends = self.sends, self.sends + 1
        if send in self.busy:
            raise PoolBusy("Request dropped due to backpressure")
            yield
        async for item in super().generate(request):
            yield item


async def test_a_full_decode_queue_after_tokens_were_sent_is_waited_out():
    # Lost after 3 tokens; the continuation finds the queue full twice, then is served.
    decode = Busy(busy={1, 2}, plan=[3, None])
    chunks, timings = await _run(decode, retry_interval_s=0.01)
    assert _tokens(chunks) == UNINTERRUPTED
    assert chunks[-1].finish_reason == "length"
    assert [m.tokens_sent for m in timings.migrations] == [3]  # the waits are no moves
    assert decode.requests[-1].prompt_token_ids == PROMPT + UNINTERRUPTED[:3]


async def test_a_full_decode_queue_before_any_token_is_the_error():
    decode = Busy(busy={0})
    with pytest.raises(PoolBusy):
        await _run(decode, retry_interval_s=0.01)
    assert decode.sends == 1  # refused at once: a plain 503, not a wait


async def test_a_queue_full_past_the_resume_timeout_is_the_error():
    decode = Busy(busy=set(range(1, 1000)), plan=[3, None])
    with pytest.raises(PoolBusy):
        await _run(decode, retry_interval_s=0.01, resume_timeout_s=0.1)
