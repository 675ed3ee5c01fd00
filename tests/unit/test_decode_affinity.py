"""Which decode replica holds a conversation (app.routing.decode_affinity), and the
remote-or-local decision that counts what that replica lacks."""

from __future__ import annotations

import itertools

from app.config import Mode
from app.flow.disaggregation import decide
from app.flow.orchestrator import Orchestrator
from app.flow.request_timings import RequestTimings
from app.pool.records import GenerateRequest
from app.routing.decode_affinity import DecodeAffinity
from tests.unit.orchestrator_fakes import CHAIN, FakeDecode, FakePrefill

BLOCK = 4
_IDS = itertools.count()  # request ids are unique, as the ingress makes them


def _turns() -> tuple[list[int], list[int], list[int]]:
    first = list(range(100, 120))  # 5 blocks
    answer = [7, 7, 7, 7, 7, 7]
    second = first + answer + [9, 9, 9]  # the history, then a short new part
    return first, answer, second


def test_next_turn_lacks_only_its_new_part_on_the_replica_that_served_the_first():
    affinity = DecodeAffinity(block_tokens=BLOCK)
    first, answer, second = _turns()
    assert affinity.lacking(second) == (len(second), None)  # nobody holds anything yet
    affinity.routed("turn1", "d1", first)
    # Before turn 1 ends, only its prompt is known to be there.
    assert affinity.lacking(second) == (len(second) - 20, "d1")
    affinity.ended("turn1", first, answer)
    # 26 tokens cached are 6 full blocks: 24; the new part and the partial block remain.
    assert affinity.lacking(second) == (len(second) - 24, "d1")


def test_a_session_sticks_to_its_replica_even_where_another_matches_more():
    affinity = DecodeAffinity(block_tokens=BLOCK)
    first, _, second = _turns()
    affinity.routed("a", "d2", second)  # d2 saw the whole prompt, outside the session
    affinity.routed("b", "d1", first, session="chat-1")
    assert affinity.lacking(second, "chat-1") == (len(second) - 20, "d1")
    assert affinity.lacking(second) == (len(second) - 28, "d2")
    queues = {"d1": 0, "d2": 0}
    assert affinity.preferred(["d1", "d2"], queues, second, "chat-1") == "d1"
    assert affinity.preferred(["d1", "d2"], queues, second) == "d2"
    # A session unknown to the replica set in hand: the best prefix match.
    assert affinity.preferred(["d2"], queues, second, "chat-1") == "d2"


def test_load_beats_affinity_past_the_imbalance_limit():
    affinity = DecodeAffinity(block_tokens=BLOCK, max_imbalance=2)
    first, _, _ = _turns()
    affinity.routed("a", "d1", first, session="s")
    assert affinity.preferred(["d1", "d2"], {"d1": 3, "d2": 0}, first, "s") is None
    assert affinity.preferred(["d1", "d2"], {"d1": 2, "d2": 0}, first, "s") == "d1"
    assert affinity.preferred(["d1", "d2"], {}, [1, 2, 3]) is None  # shorter than a block


def test_gone_replicas_take_their_prefixes_and_sessions_with_them():
    affinity = DecodeAffinity(block_tokens=BLOCK)
    first, _, _ = _turns()
    affinity.routed("a", "d1", first, session="s")
    affinity.retain({"d2"})
    assert affinity.lacking(first, "s") == (len(first), None)
    assert affinity.preferred(["d2"], {}, first, "s") is None


def test_decode_cached_is_local_only_when_the_missing_part_is_short():
    # a long prompt, of which decode lacks 10 tokens: prefilled there
    assert decide(600, 512, 0, 8, lacking_tokens=10).reason == "decode_cached"
    assert decide(600, 512, 0, 8, lacking_tokens=600).reason == "long_prompt"
    assert decide(600, 512, 0, 8).reason == "long_prompt"
    assert decide(100, 512, 0, 8, lacking_tokens=10).reason == "short_prompt"
    assert decide(600, 512, 0, 8, "prompt_logprobs", lacking_tokens=10).reason == (
        "prompt_logprobs"
    )


async def _run(orchestrator: Orchestrator, prompt: list[int], session: str | None = None):
    request = GenerateRequest(
        f"r{next(_IDS)}", prompt, sampling_params=None, session_id=session, origin_id=""
    )
    timings = RequestTimings()
    chunks = [c async for c in orchestrator.run(request, timings)]
    return chunks, timings


class RoutedDecode(FakeDecode):
    """A decode pool whose router records each request in ``affinity``, as Serve's
    KVCapacityRouter does (to the named replica, else "d1")."""

    def __init__(self, affinity: DecodeAffinity) -> None:
        super().__init__()
        self.affinity = affinity

    async def generate(self, request):
        replica = request.replica or "d1"
        self.affinity.routed(
            request.origin_id or request.request_id,
            replica,
            request.prompt_token_ids,
            request.session_id,
        )
        async for item in super().generate(request):
            yield item


async def test_the_next_turn_goes_to_the_replica_holding_it_without_a_remote_prefill():
    affinity = DecodeAffinity(block_tokens=BLOCK)
    prefill, decode = FakePrefill(), RoutedDecode(affinity)
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED,
        decode,
        prefill,
        plan=CHAIN,
        local_prefill_below_tokens=8,
        decode_affinity=affinity,
    )
    first = list(range(100, 120))
    _, timings = await _run(orchestrator, first)
    assert timings.transfer.decision_reason == "long_prompt" and len(prefill.calls) == 1
    # The fake answered tokens 1 and 2; d1 caches 22 tokens, 5 full blocks.
    second = [*first, 1, 2, 5, 5, 5]
    _, timings = await _run(orchestrator, second)
    assert timings.transfer.decision_reason == "decode_cached", timings.transfer
    assert len(prefill.calls) == 1  # the second turn needed no prefill
    assert decode.generated[-1].replica == "d1"  # sent to the replica that caches it
    # A different conversation of the same length is prefilled remotely as before.
    _, timings = await _run(orchestrator, list(range(300, 325)))
    assert timings.transfer.decision_reason == "long_prompt"


def test_what_a_replica_holds_counts_in_whole_blocks_of_its_engine_cache():
    affinity = DecodeAffinity(block_tokens=BLOCK)
    first, answer, second = _turns()
    affinity.routed("turn1", "d1", first)
    affinity.ended("turn1", first, answer)
    assert affinity.lacking(second) == (len(second) - 24, "d1")  # 6 router blocks
    # The engine caches blocks of 8 tokens: 24 held tokens are 3 whole blocks of it.
    affinity.cache_block("d1", 8)
    assert affinity.lacking(second) == (len(second) - 24, "d1")
    affinity.cache_block("d1", 16)  # one whole block of 16: 16 tokens held, not 24
    assert affinity.lacking(second) == (len(second) - 16, "d1")
    affinity.cache_block("d1", 32)  # none whole
    assert affinity.lacking(second) == (len(second), None)


def test_a_request_s_hashes_are_worked_out_once(monkeypatch):
    import app.routing.prefix_affinity as prefix_affinity

    calls = []
    real = prefix_affinity.block_hashes

    def counted(tokens, block_tokens, known=(), salt=None):
        calls.append((len(tokens), len(known)))
        return real(tokens, block_tokens, known, salt)

    monkeypatch.setattr(prefix_affinity, "block_hashes", counted)
    affinity = DecodeAffinity(block_tokens=BLOCK)
    first, answer, _ = _turns()
    affinity.lacking(first, key="r")  # the decision
    affinity.preferred(["d1"], {}, first, key="r")  # the router's choice
    affinity.routed("r", "d1", first, key="r")  # its record
    assert calls == [(20, 0)]
    # The end extends the prompt's chain with the answer's blocks only.
    import app.routing.decode_affinity as decode_affinity

    monkeypatch.setattr(decode_affinity, "block_hashes", counted)
    affinity.ended("r", first, answer, key="r")
    assert calls == [(20, 0), (26, 5)]
    assert affinity.prefixes.matched_blocks("d1", real(first + answer, BLOCK)) == 6


def test_prompts_of_two_salts_share_no_block_and_one_salt_shares_them():
    affinity = DecodeAffinity(block_tokens=BLOCK)
    first, _, _ = _turns()
    affinity.routed("r1", "d1", first, key="r1", salt="tenant-a")
    assert affinity.lacking(first, salt="tenant-a") == (len(first) % BLOCK, "d1")
    assert affinity.lacking(first, salt="tenant-b") == (len(first), None)
    assert affinity.lacking(first) == (len(first), None)
