"""EngineServer's request handling over an injected fake engine (no vLLM engine, no Ray)."""

import time

from vllm import SamplingParams

from app.engine import EngineServer
from app.kv_transport.failure import FailureKind
from app.records import GenerateRequest, Role, Started, TokenChunk


class NoEngine:
    """Fails the test if the request reaches the engine."""

    def __init__(self):
        self.generated = []

    async def generate(self, prompt, params, request_id):
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
