"""EngineServer's request handling over an injected fake engine (no vLLM engine, no Ray)."""

import time
from collections.abc import Sequence

from vllm import SamplingParams

from app.engine.server import EngineServer
from app.kv.failure import FailureKind
from app.pool.records import GenerateRequest, Role, Started, TokenChunk


class NoEngine:
    """Fails the test if the request reaches the engine."""

    def __init__(self):
        self.generated = []

    async def generate(self, prompt, params, request_id, trace_headers=None, priority=0):
        self.generated.append(request_id)
        raise AssertionError("the engine must not be asked")
        yield

    async def abort(self, request_id):
        pass


async def test_nixl_kv_past_prefills_lease_is_refused_before_the_engine_reads_it():
    engine = NoEngine()
    server = EngineServer(engine, Role.DECODE, "decode-1")
    request = GenerateRequest(
        "r",
        [1, 2, 3],
        SamplingParams(max_tokens=4),
        kv_transfer_params={"remote_block_ids": [[1]]},
        kv_num_tokens=3,
        kv_expires_at=time.time() - 5,
    )
    items = [item async for item in server.generate(request)]
    assert isinstance(items[0], Started)
    [chunk] = items[1:]
    assert isinstance(chunk, TokenChunk) and not chunk.token_ids
    assert chunk.transfer_failed is not None
    assert chunk.transfer_failed.kind is FailureKind.KV_EXPIRED
    assert engine.generated == [] and server.streams == 0


class FailedLoad:
    """An engine whose KV load fails; its connector says whether it refused the read."""

    def __init__(self, refused: list[str]):
        self.refused = refused
        self.params: dict[str, object] | None = None

    async def generate(self, prompt, params, request_id, trace_headers=None, priority=0):
        from types import SimpleNamespace

        self.params = params.extra_args["kv_transfer_params"]
        completion = SimpleNamespace(
            text="", token_ids=[], finish_reason="error", stop_reason=None, logprobs=None
        )
        yield SimpleNamespace(
            outputs=[completion], finished=True, kv_transfer_params=None, num_cached_tokens=0
        )

    async def collective_rpc(self, method, args):
        from app.kv.read_deadline import METHOD

        assert method == METHOD
        return [[rid for rid in args[0] if rid in self.refused]]

    async def abort(self, request_id):
        pass


def _failure(items: Sequence[object]) -> FailureKind:
    last = items[-1]
    assert isinstance(last, TokenChunk) and last.transfer_failed is not None, last
    return last.transfer_failed.kind


def _nixl_request(request_id: str, read_by: float) -> GenerateRequest:
    return GenerateRequest(
        request_id,
        [1, 2, 3],
        SamplingParams(max_tokens=4),
        kv_transfer_params={"remote_block_ids": [[1]]},
        kv_num_tokens=3,
        kv_expires_at=read_by,
    )


async def test_the_read_deadline_goes_to_the_connector_and_a_refusal_is_kv_expired():
    from app.kv.read_deadline import READ_BY

    read_by = time.time() + 20
    engine = FailedLoad(refused=["late"])
    server = EngineServer(engine, Role.DECODE, "decode-1")
    items = [item async for item in server.generate(_nixl_request("late", read_by))]
    assert engine.params is not None and engine.params[READ_BY] == read_by
    assert _failure(items) is FailureKind.KV_EXPIRED


async def test_a_load_failure_the_connector_did_not_refuse_is_kv_load():
    engine = FailedLoad(refused=["someone-else"])
    server = EngineServer(engine, Role.DECODE, "decode-1")
    items = [item async for item in server.generate(_nixl_request("r", time.time() + 20))]
    assert _failure(items) is FailureKind.KV_LOAD


def _from_prefill(source: str) -> GenerateRequest:
    """A request whose NIXL KV prefill replica ``source`` (engine ``prefill-e1``) holds."""
    return GenerateRequest(
        "r",
        [1, 2, 3],
        SamplingParams(max_tokens=4),
        kv_transfer_params={"remote_block_ids": [[1]], "remote_engine_id": "prefill-e1"},
        kv_num_tokens=3,
        kv_expires_at=time.time() + 20,
        kv_source=source,
    )


class Forgetful(NoEngine):
    """Records the calls into its worker."""

    def __init__(self):
        super().__init__()
        self.calls = []

    async def collective_rpc(self, method, args):
        self.calls.append((method, args))
        return [[]]


async def test_kv_held_by_a_prefill_replica_that_is_gone_is_refused_and_its_engine_forgotten():
    from app.kv.peer_fence import METHOD

    engine = Forgetful()
    server = EngineServer(engine, Role.DECODE, "decode-1")
    asked = []

    async def alive(replica: str) -> bool:
        asked.append(replica)
        return replica == "prefill-live"

    server.peer_alive = alive
    items = [item async for item in server.generate(_from_prefill("prefill-dead"))]
    assert _failure(items) is FailureKind.KV_FENCED
    assert asked == ["prefill-dead"] and engine.generated == []
    assert engine.calls == [(METHOD, (["prefill-e1"],))]


async def test_a_liveness_lookup_that_fails_falls_back_instead_of_failing_the_request():
    engine = Forgetful()
    server = EngineServer(engine, Role.DECODE, "decode-1")

    async def alive(replica: str) -> bool:
        raise RuntimeError("gcs: deadline exceeded")

    server.peer_alive = alive
    items = [item async for item in server.generate(_from_prefill("prefill-1"))]
    assert _failure(items) is FailureKind.KV_FENCED
    # Not known to be gone: its engine is not made to forget the peer, nor read from it.
    assert engine.generated == [] and engine.calls == []


class Streaming:
    """An engine that streams ``steps`` one-token outputs, pausing between them."""

    def __init__(self, steps: int = 3):
        self.steps = steps
        self.between: list[object] = []

    async def generate(self, prompt, params, request_id, trace_headers=None, priority=0):
        import asyncio
        from types import SimpleNamespace

        for step in range(self.steps):
            last = step == self.steps - 1
            completion = SimpleNamespace(
                text="x",
                token_ids=[5],
                finish_reason="length" if last else None,
                stop_reason=None,
                logprobs=None,
                cumulative_logprob=None,
            )
            yield SimpleNamespace(
                outputs=[completion],
                finished=last,
                kv_transfer_params=None,
                num_cached_tokens=0,
                prompt_logprobs=None,
            )
            await asyncio.sleep(0)

    async def abort(self, request_id):
        pass


async def test_an_object_store_payload_is_let_go_once_fetched_not_at_the_streams_end(
    monkeypatch, tmp_path
):
    import gc
    import weakref

    from app.kv import object_store

    class Payload:  # stands for an ObjectRef
        pass

    async def materialize(ref, path):
        return 10, 0.001

    monkeypatch.setattr(object_store, "materialize", materialize)
    monkeypatch.setattr(object_store, "payload_dir", lambda: tmp_path)
    payload = Payload()
    held = weakref.ref(payload)
    server = EngineServer(Streaming(), Role.DECODE, "decode-1")
    stream = server.generate(
        GenerateRequest(
            "r", [1, 2, 3], SamplingParams(max_tokens=3), kv_object=payload, kv_num_tokens=3
        )
    )
    del payload
    assert isinstance(await anext(stream), Started)
    first = await anext(stream)
    assert isinstance(first, TokenChunk) and first.token_ids == [5]
    gc.collect()
    assert held() is None  # the stream goes on; the payload is no longer pinned by it
    rest = [item async for item in stream]
    assert isinstance(rest[-1], TokenChunk) and rest[-1].finish_reason == "length"
