"""Routing against real engines: prefix affinity on a 2-replica pool, conditional
disaggregation on the default app."""

from collections import defaultdict

from tests.integration.helpers import GREEDY, complete, random_prompt


def test_prefix_sharing_requests_stick_to_one_replica_and_hit_its_cache(apps, http):
    """The colocated reference app runs 2 replicas behind the prefix-affinity router."""
    systems = [random_prompt(8000 + i, 192) for i in range(4)]  # one full 128-token block+
    engines: dict[int, set[str]] = defaultdict(set)
    hits = []
    for question in range(3):
        for i, system in enumerate(systems):
            prompt = system + random_prompt(8100 + 10 * i + question, 20)
            body = complete(http, apps.colocated, {**GREEDY, "max_tokens": 2, "prompt": prompt})
            engines[i].add(body["splitserve"]["decode_engine"])
            if question:
                hits.append(body["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert all(len(replicas) == 1 for replicas in engines.values()), engines
    assert len(set().union(*engines.values())) == 2, "prefixes should spread over both replicas"
    # vLLM reports the shared block as a prefix-cache hit on the replica that got it.
    assert all(hit >= 128 for hit in hits), hits


def test_short_prompts_skip_remote_prefill(apps, http):
    short = random_prompt(8200, 20)
    body = complete(http, apps.disaggregated, {**GREEDY, "prompt": short})
    timing = body["splitserve"]
    assert timing["disaggregated"] is False and timing["decision"] == "short_prompt"
    assert timing["prefill_engine"] is None and timing["kv_bytes"] == 0
    # Prefilled on decode by choice: no KV moved, and no transport counted.
    assert timing["kv_transport"] == "local" and timing["fallbacks"] == []
    reference = complete(http, apps.colocated, {**GREEDY, "prompt": short})
    assert body["choices"][0]["text"] == reference["choices"][0]["text"]

    long = complete(http, apps.disaggregated, {**GREEDY, "prompt": random_prompt(8201, 300)})
    assert long["splitserve"]["disaggregated"] is True
    assert long["splitserve"]["decision"] == "long_prompt"
    assert long["splitserve"]["prefill_engine"].startswith("prefill-")


def test_a_conversations_next_turn_is_prefilled_on_the_decode_replica_that_holds_it(apps, http):
    """Turn 2 repeats turn 1 and its answer, then adds a short part: the decode replica
    caches the history (turn 1's KV moved there, and its answer computed there), so only
    the new part is computed there, with no remote prefill (issue 33's decision)."""
    first = random_prompt(8300, 630)
    one = complete(
        http,
        apps.disaggregated,
        {**GREEDY, "prompt": first, "return_token_ids": True},
        headers={"x-session-id": "integration-chat"},
    )
    assert one["splitserve"]["decision"] == "long_prompt", one["splitserve"]
    answer = one["choices"][0]["token_ids"]
    # 646 tokens of history; decode's engine holds whole 128-token blocks of it: 640. The
    # rest and the 20 new tokens are 26 (< 64, the test app's local_prefill_below_tokens).
    second = [*first, *answer, *random_prompt(8301, 20)]
    two = complete(
        http,
        apps.disaggregated,
        {**GREEDY, "prompt": second},
        headers={"x-session-id": "integration-chat"},
    )
    assert two["splitserve"]["decision"] == "decode_cached", two["splitserve"]
    assert two["splitserve"]["decode_engine"] == one["splitserve"]["decode_engine"]
    # The decode engine found the history in its own prefix cache: its full blocks (the
    # CPU backend's are 128 tokens: 5 of the 646 tokens' 5.05).
    assert two["usage"]["prompt_tokens_details"]["cached_tokens"] >= 512, two["usage"]
    assert two["usage"]["completion_tokens"] == GREEDY["max_tokens"]
