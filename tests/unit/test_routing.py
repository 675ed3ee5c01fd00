from app.flow.disaggregation import decide
from app.routing.kv_capacity import rank_by_capacity
from app.routing.prefix_affinity import PrefixAffinity, block_hashes

SYSTEM_A = list(range(100, 228))  # two 64-token blocks
SYSTEM_B = list(range(300, 428))


def test_block_hashes_chain_over_full_blocks_only():
    assert block_hashes(list(range(63)), 64) == []
    a = block_hashes([*SYSTEM_A, 1, 2, 3], 64)
    b = block_hashes(SYSTEM_A + [9] * 70, 64)
    assert len(a) == 2 and len(b) == 3
    assert a == b[:2]  # same prefix, same leading hashes
    assert block_hashes(SYSTEM_B, 64)[0] != a[0]
    # a chain: the same block after a different prefix hashes differently
    assert block_hashes([0] * 64 + SYSTEM_A[:64], 64)[1] != a[0]


def test_prompts_sharing_a_prefix_stick_to_one_replica():
    policy = PrefixAffinity(block_tokens=64, max_imbalance=4)
    replicas = ["r1", "r2"]
    first = policy.rank(replicas, {}, policy.hashes([*SYSTEM_A, 1]))[0][0]
    policy.record(first, policy.hashes([*SYSTEM_A, 1]))
    other = "r2" if first == "r1" else "r1"
    policy.record(other, policy.hashes([*SYSTEM_B, 1]))
    for question in range(5):
        ranked = policy.rank(replicas, {first: 1, other: 0}, policy.hashes([*SYSTEM_A, question]))
        assert ranked[0] == [first]
        ranked = policy.rank(replicas, {first: 0, other: 1}, policy.hashes([*SYSTEM_B, question]))
        assert ranked[0] == [other]


def test_load_beats_affinity_past_the_imbalance_limit():
    policy = PrefixAffinity(block_tokens=64, max_imbalance=2)
    policy.record("hot", policy.hashes(SYSTEM_A))
    hashes = policy.hashes([*SYSTEM_A, 5])
    assert policy.rank(["hot", "cold"], {"hot": 2, "cold": 0}, hashes)[0] == ["hot"]
    assert policy.rank(["hot", "cold"], {"hot": 3, "cold": 0}, hashes) == [["cold"], ["hot"]]


def test_unknown_prefixes_go_to_the_shortest_queue():
    policy = PrefixAffinity(block_tokens=64)
    assert policy.rank(["a", "b"], {"a": 3, "b": 1}, policy.hashes(SYSTEM_A))[0] == ["b"]


def test_new_prefixes_spread_over_the_pool():
    policy = PrefixAffinity(block_tokens=64)
    chosen = []
    for system in (SYSTEM_A, SYSTEM_B, list(range(500, 628)), list(range(700, 828))):
        replica = policy.rank(["a", "b"], {}, policy.hashes(system))[0][0]
        policy.record(replica, policy.hashes(system))
        chosen.append(replica)
    assert sorted(chosen) == ["a", "a", "b", "b"]


def test_memory_per_replica_is_bounded_and_forgotten_with_the_replica():
    policy = PrefixAffinity(block_tokens=1, max_blocks_per_replica=10)
    policy.record("r", policy.hashes(list(range(50))))
    assert policy.matched_blocks("r", policy.hashes(list(range(50)))) == 0  # oldest evicted
    policy.record("r", policy.hashes([1, 2]))
    assert policy.matched_blocks("r", policy.hashes([1, 2, 3])) == 2
    policy.forget("r")
    assert policy.matched_blocks("r", policy.hashes([1, 2])) == 0


def test_decode_capacity_prefers_room_then_short_queues_then_free_kv():
    stats = {"a": {"kv_cache_usage": 0.9}, "b": {"kv_cache_usage": 0.2}, "c": {}}
    assert rank_by_capacity(["a", "b", "c"], stats, {}) == [["c"], ["b"], ["a"]]
    assert rank_by_capacity(["a", "b"], {}, {"a": 2, "b": 1})[0] == ["b"]
    waiting = {"a": {"kv_cache_usage": 0.1, "waiting": 10}, "b": {"kv_cache_usage": 0.3}}
    assert rank_by_capacity(["a", "b"], waiting, {})[0] == ["b"]
    # The reports are a second old: between caches with room, the router's own count of
    # what it sent decides, so a burst does not all go where the last report looked
    # freest ...
    roomy = {"a": {"kv_cache_usage": 0.05}, "b": {"kv_cache_usage": 0.3}}
    assert rank_by_capacity(["a", "b"], roomy, {"a": 5, "b": 1})[0] == ["b"]
    # ... and a nearly full cache ranks last however short its queue (it would preempt)
    tight = {"a": {"kv_cache_usage": 0.85}, "b": {"kv_cache_usage": 0.3}}
    assert rank_by_capacity(["a", "b"], tight, {"a": 0, "b": 6})[0] == ["b"]


def test_conditional_disaggregation():
    assert decide(10, 64, 0, 16).reason == "short_prompt"
    assert not decide(10, 64, 0, 16).remote
    assert decide(500, 64, 16, 16).reason == "prefill_backlog"
    long = decide(500, 64, 3, 16)
    assert long.remote and long.reason == "long_prompt"
    assert decide(1, 0, 0, 16).remote  # threshold 0 disaggregates everything


def test_prefix_memory_keeps_only_live_replicas():
    policy = PrefixAffinity(block_tokens=4)
    hashes = policy.hashes(list(range(16)))
    for replica in ("a", "b", "c"):
        policy.record(replica, hashes)
    # A downscale or a redeploy removes b and c: their memory goes with them.
    policy.retain({"a", "d"})
    assert policy.matched_blocks("a", hashes) == 4
    assert policy.matched_blocks("b", hashes) == 0 and set(policy._seen) == {"a"}


def test_the_decision_reasons_metrics_start_at_zero_are_the_ones_decide_gives():
    from app.flow.disaggregation import LOCAL_REASONS, REMOTE_REASONS, decide

    given = {
        decide(100, 512, 0, 16),
        decide(600, 512, 0, 16, prefill_serving=False),
        decide(600, 512, 16, 16),
        decide(600, 512, 0, 16),
        decide(600, 512, 0, 16, lacking_tokens=40),
    }
    assert {(d.remote, d.reason) for d in given} == {
        *((True, r) for r in REMOTE_REASONS),
        *((False, r) for r in LOCAL_REASONS),
    }
