"""Proof that decode used the KV prefill computed, pulled over NIXL, not a recompute."""

from ray import serve

from app.pool.records import GenerateRequest
from tests.integration.faults import decode_chunks, prefill_once
from tests.integration.helpers import GREEDY, complete, random_prompt


def _counters(deployment: str) -> dict[str, float]:
    handle = serve.get_deployment_handle(deployment, app_name="splitserve")
    return dict(handle.stats.remote().result().counters)


def _delta(after, before, name):
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_decode_engine_reports_nixl_transfer(apps, http):
    prompt = random_prompt(4242, 300)
    before = _counters("Decode")
    complete(http, apps.disaggregated, {**GREEDY, "prompt": prompt})
    after = _counters("Decode")
    # The decode engine found the prompt's tokens outside its own cache ...
    assert _delta(after, before, "vllm:external_prefix_cache_hits_total") >= 256, after
    # ... and no local prefix-cache hit explains them.
    assert _delta(after, before, "vllm:prefix_cache_hits_total") == 0


def test_swapped_kv_swaps_outputs(apps, http):
    """Negative control: hand decode the KV of another prompt and get that prompt's output.

    A and B have the same length and the same last token, so decode(A's tokens, B's KV)
    computes exactly what B would. If decode recomputed the prompt instead of using the
    transferred KV, it would answer A's output.
    """
    from vllm import SamplingParams

    a = random_prompt(9001, 200, last_token=77)
    b = random_prompt(9002, 200, last_token=77)
    want_a = complete(http, apps.colocated, {**GREEDY, "prompt": a})["choices"][0]["text"]
    want_b = complete(http, apps.colocated, {**GREEDY, "prompt": b})["choices"][0]["text"]
    assert want_a != want_b

    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    kv_a = prefill_once(GenerateRequest("swap-a", a, params))
    kv_b = prefill_once(GenerateRequest("swap-b", b, params))

    def decode_text(request_id, prompt, kv):
        request = GenerateRequest(request_id, prompt, params, kv.kv_transfer_params)
        return "".join(chunk.text for chunk in decode_chunks(request))

    assert decode_text("swap-a-with-b", a, kv_b) == want_b
    assert decode_text("swap-b-with-a", b, kv_a) == want_a


def test_decode_measures_each_prefill_link(apps, http):
    """Warm-up measured the prefill replica's link into decode for each transport, and a
    long prompt's NIXL transfer is measured on that link too (app.kv.link_meter)."""
    decode = serve.get_deployment_handle("Decode", app_name="splitserve")
    links = decode.links.remote().result()
    measured = {link["transport"] for link in links if link["bytes_per_s"] > 0}
    assert {"nixl", "object_store"} <= measured, links
    before = {(link["prefill"], link["transport"]): link["transfers"] for link in links}
    # 1,200 tokens of KV is over the 1 MiB that a measured transfer needs.
    answer = complete(http, apps.disaggregated, {**GREEDY, "prompt": random_prompt(4343, 1200)})
    assert answer["splitserve"]["kv_transport"] == "nixl", answer["splitserve"]
    grown = [
        link
        for link in decode.links.remote().result()
        if link["transfers"] > before.get((link["prefill"], link["transport"]), 0)
    ]
    assert [link["transport"] for link in grown] == ["nixl"], grown
