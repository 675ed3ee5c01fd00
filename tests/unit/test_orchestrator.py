import pytest

from app.config import Mode
from app.orchestrator import Orchestrator, PoolClient, RequestTimings
from app.records import GenerateRequest, PrefillResult, TokenChunk


class FakePool(PoolClient):
    """Records what it was asked; streams two chunks."""

    def __init__(self):
        self.prefilled: list[GenerateRequest] = []
        self.generated: list[GenerateRequest] = []

    async def prefill(self, request):
        self.prefilled.append(request)
        return PrefillResult({"remote_block_ids": [[7]], "req": request.request_id}, 3, 0.01)

    async def generate(self, request):
        self.generated.append(request)
        yield TokenChunk("a", [1])
        yield TokenChunk("b", [2], finish_reason="length")


def _request():
    return GenerateRequest("r1", [1, 2, 3], sampling_params=None)


async def test_disaggregated_hands_prefill_params_to_decode():
    prefill, decode = FakePool(), FakePool()
    timings = RequestTimings()
    chunks = [
        c async for c in Orchestrator(Mode.DISAGGREGATED, decode, prefill).run(_request(), timings)
    ]
    assert [c.text for c in chunks] == ["a", "b"]
    assert [r.request_id for r in prefill.prefilled] == ["r1"]
    assert decode.generated[0].kv_transfer_params == {"remote_block_ids": [[7]], "req": "r1"}
    assert 0 <= timings.prefill_s <= timings.first_token_s <= timings.total_s


async def test_colocated_skips_prefill():
    decode = FakePool()
    chunks = [c async for c in Orchestrator(Mode.COLOCATED, decode).run(_request())]
    assert len(chunks) == 2
    assert decode.generated[0].kv_transfer_params is None


def test_disaggregated_needs_a_prefill_pool():
    with pytest.raises(ValueError, match="prefill pool"):
        Orchestrator(Mode.DISAGGREGATED, FakePool())
