"""An engine's cached blocks from its KV events (vLLM's own event classes), named as the
router names a prompt's blocks, and the ingress's index of them."""

from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

from app.routing.engine_blocks import EngineBlocks
from app.routing.prefix_affinity import block_hashes
from app.routing.prefix_index import PrefixIndex

B = 4  # tokens per block


def stored(engine_hashes, parent, tokens, salt=None, medium="CPU", size=B):
    extra = [(salt,) if salt else None] + [None] * (len(engine_hashes) - 1)
    return BlockStored(
        block_hashes=list(engine_hashes),
        parent_block_hash=parent,
        token_ids=list(tokens),
        block_size=size,
        lora_id=None,
        medium=medium,
        lora_name=None,
        extra_keys=extra,
    )


PROMPT = list(range(100, 112))  # three blocks


def test_stored_blocks_are_named_as_the_router_names_the_prompt():
    engine = EngineBlocks(B)
    # The engine caches the first two blocks, then the third in a later step.
    engine.apply([stored([b"e1", b"e2"], None, PROMPT[:8])])
    engine.apply([stored([b"e3"], b"e2", PROMPT[8:12])])
    changes = engine.changes(None, 0)
    assert changes.full and sorted(changes.added) == sorted(block_hashes(PROMPT, B))
    assert engine.held == 3 and engine.unnamed == 0


def test_a_salted_chain_matches_only_the_same_salt():
    engine = EngineBlocks(B)
    engine.apply([stored([1, 2], None, PROMPT[:8], salt="tenant-a")])
    held = set(engine.changes(None, 0).added)
    assert held == set(block_hashes(PROMPT[:8], B, salt="tenant-a"))
    assert not held & set(block_hashes(PROMPT[:8], B))
    assert not held & set(block_hashes(PROMPT[:8], B, salt="tenant-b"))


def test_removed_and_cleared_blocks_leave_and_readers_get_only_the_changes():
    engine = EngineBlocks(B)
    engine.apply([stored([1, 2, 3], None, PROMPT)])
    first = engine.changes(None, 0)
    hashes = block_hashes(PROMPT, B)
    engine.apply([BlockRemoved(block_hashes=[3], medium="CPU")])
    delta = engine.changes(first.epoch, first.version)
    assert not delta.full and delta.added == [] and delta.removed == [hashes[2]]
    # Nothing new: an empty delta of the same version.
    same = engine.changes(first.epoch, delta.version)
    assert (same.added, same.removed, same.version) == ([], [], delta.version)
    engine.apply([AllBlocksCleared()])
    cleared = engine.changes(first.epoch, delta.version)
    assert cleared.full and cleared.added == [] and cleared.epoch != first.epoch


def test_a_span_of_changes_leaves_each_block_as_its_last_change_did():
    engine = EngineBlocks(B)
    engine.apply([stored([1, 2], None, PROMPT[:8])])
    start = engine.changes(None, 0)
    hashes = block_hashes(PROMPT[:8], B)
    # Evicted and cached again, then the second evicted, within one reader's gap; and a
    # store and an eviction of the same block within one batch.
    engine.apply([BlockRemoved(block_hashes=[1, 2], medium="CPU")])
    engine.apply([stored([11], None, PROMPT[:4])])
    engine.apply([stored([12], 11, PROMPT[4:8]), BlockRemoved(block_hashes=[12], medium="CPU")])
    delta = engine.changes(start.epoch, start.version)
    assert delta.added == [hashes[0]] and delta.removed == [hashes[1]]
    # Stored and evicted between two reads: removed, for a reader that expected it.
    middle = engine.changes(start.epoch, engine.version)
    engine.apply([stored([13], 11, PROMPT[4:8])])
    engine.apply([BlockRemoved(block_hashes=[13], medium="CPU")])
    late = engine.changes(middle.epoch, middle.version)
    assert late.added == [] and late.removed == [hashes[1]]


def test_a_block_whose_parent_was_never_seen_is_left_out_with_its_children():
    engine = EngineBlocks(B)
    engine.apply([stored([7, 8], b"unknown parent", PROMPT[4:12])])
    assert engine.held == 0 and engine.unnamed == 2
    # A re-report of a held block (a prefix-cache hit) adds nothing.
    engine.apply([stored([1], None, PROMPT[:4])])
    version = engine.version
    engine.apply([stored([1], None, PROMPT[:4])])
    assert engine.held == 1 and engine.version == version


def test_other_media_partial_blocks_and_lost_events():
    engine = EngineBlocks(B)
    engine.apply([stored([1], None, PROMPT[:4], medium="STORAGE")])
    engine.apply([stored([2], None, PROMPT[:2], size=2)])
    assert engine.held == 0
    engine.apply([stored([3], None, PROMPT[:4])])
    epoch = engine.epoch
    engine.lost()
    assert engine.held == 0 and engine.epoch != epoch
    assert engine.changes(epoch, engine.version).full


def test_a_reader_behind_the_log_gets_the_full_set():
    engine = EngineBlocks(B, log_size=2)
    start = engine.changes(None, 0)
    for i in range(3):
        engine.apply([stored([i], None, [i] * B)])
    assert engine.changes(start.epoch, start.version).full
    assert not engine.changes(start.epoch, engine.version - 2).full


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_index_counts_held_and_recently_routed_blocks():
    clock = Clock()
    index = PrefixIndex(expect_s=2.0, clock=clock)
    index.retain({"r1", "r2"})
    engine = EngineBlocks(B)
    engine.apply([stored([1, 2], None, PROMPT[:8])])
    index.update("r1", engine.changes(*index.since("r1")))
    hashes = block_hashes(PROMPT, B)
    assert index.matched_blocks("r1", hashes) == 2 and index.matched_blocks("r2", hashes) == 0
    assert index.block_tokens == B
    # Routed to r2: expected there until a read shows it or the expectation runs out.
    index.routed("r2", hashes)
    assert index.matched_blocks("r2", hashes) == 3
    clock.now = 2.5
    assert index.matched_blocks("r2", hashes) == 0
    # An eviction read from r1 drops the block and what was expected of it.
    index.routed("r1", hashes)
    engine.apply([BlockRemoved(block_hashes=[2], medium="CPU")])
    index.update("r1", engine.changes(*index.since("r1")))
    assert index.matched_blocks("r1", hashes) == 1
    # A replica that left the pool is forgotten, and a late read of it ignored.
    index.retain({"r2"})
    index.update("r1", engine.changes(None, 0))
    assert index.replicas() == ["r2"] and index.matched_blocks("r1", hashes) == 0


def test_blocks_a_full_cache_is_about_to_evict_for_requests_just_routed_do_not_count():
    """A cache of 4 blocks holds two conversations (2 blocks each, A's the older).
    Routed to it next: a request of 2 new blocks. The cache must evict A's two for them
    (least recently used), so A's blocks no longer count as matched, B's still do; with
    A used again since, B's are the ones at risk."""
    clock = Clock()
    index = PrefixIndex(expect_s=2.0, clock=clock)
    index.retain({"r"})
    engine = EngineBlocks(B, capacity=4)
    a, b, c = list(range(100, 108)), list(range(200, 208)), list(range(300, 308))
    engine.apply([stored([1, 2], None, a)])
    engine.apply([stored([3, 4], None, b)])
    index.update("r", engine.changes(*index.since("r")))
    ha, hb, hc = (block_hashes([*p, 0], B) for p in (a, b, c))
    assert index.matched_blocks("r", ha) == 2 and index.matched_blocks("r", hb) == 2
    index.routed("r", hc)  # 2 new blocks coming: the cache is 4 + 2 - 4 = 2 over
    assert index.matched_blocks("r", ha) == 0 and index.matched_blocks("r", hb) == 2
    index.routed("r", ha)  # A used again: now B's are the oldest
    assert index.matched_blocks("r", ha) == 2 and index.matched_blocks("r", hb) == 0
    # Once the new blocks are stored and the evictions read, the index is exact again.
    engine.apply([BlockRemoved(block_hashes=[3, 4], medium="CPU"), stored([5, 6], None, c)])
    index.update("r", engine.changes(*index.since("r")))
    assert [index.matched_blocks("r", h) for h in (ha, hb, hc)] == [2, 0, 2]
    # An engine that does not tell its size: nothing is predicted evicted.
    clock.now = 10.0
    other = PrefixIndex(expect_s=2.0, clock=clock)
    other.retain({"r"})
    other.update("r", EngineBlocks(B).changes(None, 0))
    unsized = EngineBlocks(B)
    unsized.apply([stored([1, 2], None, a)])
    other.update("r", unsized.changes(None, 0))
    other.routed("r", hc)
    assert other.matched_blocks("r", ha) == 2


def test_what_running_requests_take_beyond_their_whole_prompt_blocks_is_counted_too():
    """The cache of 4 holds A's and B's 2 blocks each. A request of 1 whole new block
    that also takes 1 more (its partial last block, its answer) while it runs needs 2:
    A's both go. How many more a request takes: its prompt and answer, in blocks, less
    its whole prompt blocks."""
    from types import SimpleNamespace

    from app.pool.records import GenerateRequest
    from deployments.request_routers import running_blocks

    clock = Clock()
    index = PrefixIndex(expect_s=2.0, clock=clock)
    index.retain({"r"})
    engine = EngineBlocks(B, capacity=4)
    a, b = list(range(100, 108)), list(range(200, 208))
    engine.apply([stored([1, 2], None, a), stored([3, 4], None, b)])
    index.update("r", engine.changes(*index.since("r")))
    ha, hb = block_hashes([*a, 0], B), block_hashes([*b, 0], B)
    new = block_hashes(list(range(300, 306)), B)  # one whole block
    index.routed("r", new)
    # One over: A's last block (an engine frees a request's blocks in reverse, so a
    # cache evicts a prompt from its tail).
    assert index.matched_blocks("r", ha) == 1
    index.routed("r", [], more_blocks=1)
    assert index.matched_blocks("r", ha) == 0 and index.matched_blocks("r", hb) == 2
    clock.now = 2.5  # the routed requests are done (expected and running time out)
    assert index.matched_blocks("r", ha) == 2
    # and what ran out is dropped, not counted again at every decision
    state = index._replicas["r"]
    assert not state.expected and not state.running
    request = GenerateRequest("q", list(range(6)), SimpleNamespace(max_tokens=5))
    assert running_blocks(request, new, B) == 2  # 6 + 5 tokens: 3 blocks, 1 whole
    assert running_blocks(request, new, 0) == 0
    # an answer's blocks come as its tokens do: at most one counts, whatever max_tokens
    long = GenerateRequest("q", list(range(6)), SimpleNamespace(max_tokens=16384))
    assert running_blocks(long, new, B) == 2
