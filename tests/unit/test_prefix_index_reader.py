"""The ingress's reader of the engines' prefix caches, against a fake pool handle, and
the routers' policy reading the index it fills."""

import asyncio
import time
from collections.abc import Callable

from vllm.distributed.kv_events import BlockRemoved

from app.config import AppConfig
from app.routing.engine_blocks import EngineBlocks
from app.routing.prefix_affinity import PrefixAffinity, block_hashes
from app.routing.prefix_index import PrefixIndex
from deployments.prefix_index_reader import PrefixIndexReader, indexed_pools

B = 4


class Remote:
    def __init__(self, call):  # type: ignore[no-untyped-def]
        self.call = call

    async def remote(self, query):  # type: ignore[no-untyped-def]
        return self.call(query)


class FakePool:
    """Replicas by id, each with an EngineBlocks; a replica that is down raises."""

    def __init__(self, replicas: dict[str, EngineBlocks]) -> None:
        self.replicas = replicas
        self.down: set[str] = set()
        self.kv_blocks = Remote(self._answer)

    def _answer(self, query):  # type: ignore[no-untyped-def]
        if query.replica in self.down:
            raise RuntimeError("replica unreachable")
        return self.replicas[query.replica].changes(query.epoch, query.since)


class Stored:  # the shape of vLLM's BlockStored the index reads
    def __init__(self, hashes, parent, tokens):  # type: ignore[no-untyped-def]
        self.block_hashes, self.parent_block_hash, self.token_ids = hashes, parent, tokens
        self.block_size, self.lora_id, self.medium, self.extra_keys = B, None, "CPU", None


Stored.__name__ = "BlockStored"


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Waits for what the reader's loops do in their own time; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


def test_the_reader_fills_each_pools_index_and_skips_a_replica_that_does_not_answer():
    async def scenario() -> None:
        engines = {"a": EngineBlocks(B), "b": EngineBlocks(B)}
        pool = FakePool(engines)
        index = PrefixIndex()
        index.retain({"a", "b"})
        reader = PrefixIndexReader(
            {"decode": pool}, {"decode": index}, wait_s=0.01, min_interval_s=0.01
        )
        reader.start()
        prompt = list(range(8))
        engines["a"].apply([Stored([1, 2], None, prompt)])
        pool.down.add("b")
        hashes = block_hashes(prompt, B)
        await _until(lambda: index.matched_blocks("a", hashes) == 2 and reader.failures >= 1)
        assert index.matched_blocks("b", hashes) == 0
        # b comes back with the same blocks; a loses them.
        pool.down.clear()
        engines["b"].apply([Stored([7, 8], None, prompt)])
        engines["a"].lost()
        await _until(
            lambda: (
                index.matched_blocks("b", hashes) == 2 and index.matched_blocks("a", hashes) == 0
            )
        )
        # A replica that leaves the pool is no longer read.
        index.retain({"b"})
        await _until(lambda: set(reader._loops) == {("decode", "b")})
        reader.close()
        await asyncio.sleep(0)

    asyncio.run(scenario())


def test_the_policy_ranks_by_the_index_in_the_engines_blocks():
    index = PrefixIndex()
    index.retain({"a", "b"})
    engine = EngineBlocks(B)
    prompt = list(range(12))
    engine.apply([Stored([1, 2, 3], None, prompt)])
    index.update("b", engine.changes(None, 0))
    policy = PrefixAffinity(block_tokens=64, max_imbalance=4, index=index)
    assert policy.block_tokens == B  # the engines' block, once a replica reported it
    hashes = policy.hashes(prompt, "r1")
    assert policy.rank(["a", "b"], {"a": 0, "b": 1}, hashes)[0] == ["b"]
    # Too long a queue: load wins over the cache.
    assert policy.rank(["a", "b"], {"a": 0, "b": 9}, hashes)[0] == ["a"]


def test_only_pools_whose_router_reads_prefixes_get_an_index():
    config = AppConfig.model_validate({"router": {"prefix_source": "kv_events"}})
    assert set(indexed_pools(config, ["prefill", "decode"])) == {"prefill", "decode"}
    plain = config.model_copy(
        update={"router": config.router.model_copy(update={"decode_policy": "serve_default"})}
    )
    assert set(indexed_pools(plain, ["prefill", "decode"])) == {"prefill"}
    assert indexed_pools(AppConfig(), ["prefill", "decode"]) == {}


def test_kv_events_need_the_prefix_cache():
    import pytest

    with pytest.raises(ValueError, match="enable_prefix_caching"):
        AppConfig.model_validate(
            {"router": {"prefix_source": "kv_events"}, "model": {"enable_prefix_caching": False}}
        )


def test_a_prefix_no_engine_holds_goes_back_where_it_was_routed():
    index = PrefixIndex(expect_s=0.0)  # no expectation: only what the engines said
    index.retain({"a", "b"})
    policy = PrefixAffinity(block_tokens=B, max_imbalance=4, index=index)
    hashes = policy.hashes(list(range(12)))
    policy.record("b", hashes)  # routed to b once; evicted there since
    assert policy.matched_blocks("b", hashes) == 0
    assert policy.rank(["a", "b"], {"a": 0, "b": 0}, hashes)[0] == ["b"]


def test_decode_affinity_by_the_index_needs_no_session_id():
    from app.routing.decode_affinity import DecodeAffinity

    index = PrefixIndex(expect_s=0.0)
    index.retain({"d1", "d2"})
    engine = EngineBlocks(B)
    history = list(range(100, 112))  # a conversation's prompt and answer, on d2
    engine.apply([Stored([1, 2, 3], None, history)])
    index.update("d2", engine.changes(None, 0))
    affinity = DecodeAffinity(block_tokens=64, max_imbalance=4, index=index)
    next_turn = [*history, 7, 7]
    assert affinity.lacking(next_turn) == (2, "d2")
    assert affinity.preferred(["d1", "d2"], {"d1": 0, "d2": 0}, next_turn) == "d2"
    # Evicted there (as d2's events said): nothing held, the whole prompt lacking.
    engine.apply([BlockRemoved(block_hashes=[1], medium="CPU")])
    index.update("d2", engine.changes(*index.since("d2")))
    assert affinity.lacking(next_turn) == (14, None)


def test_the_readers_question_held_by_a_replica_is_not_counted_as_its_queue():
    # Serve counts the long poll in the replica's queue length; were it left in, a replica
    # whose question was just answered would look the least loaded, and new prefixes
    # would all follow the replica that served the last one.
    async def scenario() -> None:
        release = asyncio.Event()
        engines = {"a": EngineBlocks(B)}

        class HeldPool:
            async def _held(self, query):  # type: ignore[no-untyped-def]
                await release.wait()
                return engines["a"].changes(query.epoch, query.since)

            def __init__(self) -> None:
                self.kv_blocks = type("R", (), {"remote": self._held})()

        index = PrefixIndex()
        index.retain({"a"})
        reader = PrefixIndexReader({"decode": HeldPool()}, {"decode": index}, wait_s=5.0)
        reader.start()
        await _until(lambda: index.requests_queued("a", 1) == 0)  # the question is held
        assert index.requests_queued("a", 3) == 2  # two requests besides it
        assert index.requests_queued("b", 1) == 1  # no question to b
        release.set()
        await _until(lambda: reader.reads >= 1)
        reader.close()
        await asyncio.sleep(0)

    asyncio.run(scenario())


def test_a_question_that_fails_is_not_counted_once_it_ended():
    index = PrefixIndex()
    index.polling("a", +1)
    index.polling("a", +1)
    assert index.requests_queued("a", 2) == 0
    index.polling("a", -1)
    index.polling("a", -1)
    assert index.requests_queued("a", 2) == 2
    index.polling("a", -1)  # never below none
    assert index.requests_queued("a", 0) == 0 and index.requests_queued("a", 1) == 1
