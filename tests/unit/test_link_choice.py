"""The measured links in the decode choice and the plan's order (app.routing.link_choice),
and the orchestrator following the order it is given."""

from __future__ import annotations

import pytest

from app.config import Mode
from app.flow.orchestrator import Orchestrator
from app.observability.link_meter import LinkMeter
from app.routing.link_choice import LinkBook, demote_slow_pairs
from tests.unit.orchestrator_fakes import CHAIN, NX, OS, RC, FakeDecode, FakePrefill, run_request

MIB = 1 << 20


def test_a_nixl_read_avoids_decode_replicas_whose_link_from_its_prefill_is_slow():
    ranks = [["d1"], ["d2"], ["d3"]]
    stats = {"d1": {"slow_links": ["p1"]}, "d2": {"slow_links": ["p2"]}, "d3": {}}
    assert demote_slow_pairs(ranks, stats, "p1") == [["d2"], ["d3"], ["d1"]]
    assert demote_slow_pairs(ranks, stats, "p2") == [["d1"], ["d3"], ["d2"]]
    assert demote_slow_pairs(ranks, stats, "p3") == ranks  # no slow pair: as ranked
    # Every pair slow: still served, in the ranked order.
    every = {d: {"slow_links": ["p1"]} for d in ("d1", "d2", "d3")}
    assert demote_slow_pairs(ranks, every, "p1") == ranks


def test_a_rank_of_several_splits_into_the_fast_then_the_slow():
    stats = {"d1": {"slow_links": ["p1"]}}
    assert demote_slow_pairs([["d1", "d2"]], stats, "p1") == [["d2"], ["d1"]]


def test_the_plan_puts_the_object_store_first_only_where_nixl_is_slow_on_every_pair():
    book = LinkBook()
    assert book.order(CHAIN) == CHAIN  # nothing measured
    book.update("d1", {"nixl_links": ["p1", "p2"], "slow_links": ["p1"]})
    assert book.order(CHAIN) == CHAIN  # p2 -> d1 is fast: routing avoids the slow pair
    book.update("d1", {"nixl_links": ["p1", "p2"], "slow_links": ["p1", "p2"]})
    assert book.order(CHAIN) == (OS, NX, RC)
    book.update("d2", {"nixl_links": ["p1"], "slow_links": []})
    assert book.order(CHAIN) == CHAIN
    book.retain({"d1"})  # d2 is gone
    assert book.order(CHAIN) == (OS, NX, RC)
    assert book.order((NX, RC)) == (NX, RC)  # nothing to reorder to


@pytest.mark.parametrize("value", ["p1", 3, None, {"p1": 1}])
def test_figures_of_the_wrong_shape_count_as_none(value):
    book = LinkBook()
    book.update("d1", {"nixl_links": value, "slow_links": value})
    assert not book.nixl_slow_everywhere()
    assert demote_slow_pairs([["d1"], ["d2"]], {"d1": {"slow_links": value}}, "p") == [
        ["d1"],
        ["d2"],
    ]


def test_the_decode_replica_reports_its_measured_and_slow_nixl_sources():
    meter = LinkMeter()
    assert meter.sources() == ([], [])
    meter.observe("p1", OS, 8 * MIB, 0.004)
    meter.observe("p1", NX, 8 * MIB, 0.040)  # a tenth of the object store's rate
    meter.observe("p2", NX, 8 * MIB, 0.002)
    assert meter.sources() == (["p1", "p2"], ["p1"])


async def test_the_orchestrator_tries_the_transports_in_the_order_given():
    prefill, decode = FakePrefill(), FakeDecode()
    orchestrator = Orchestrator(
        Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, plan_order=lambda plan: (OS, NX, RC)
    )
    texts, timings = await run_request(orchestrator)
    assert texts == ["a", "b"]
    assert prefill.calls == [("r1", OS)]
    assert timings.transfer.transport is OS


def _broken(plan):
    raise RuntimeError("no figures")


@pytest.mark.parametrize("order", [_broken, lambda plan: (NX, OS), lambda plan: (RC, NX, OS)])
async def test_an_ordering_that_fails_or_changes_the_transports_is_ignored(order):
    prefill, decode = FakePrefill(), FakeDecode()
    orchestrator = Orchestrator(Mode.DISAGGREGATED, decode, prefill, plan=CHAIN, plan_order=order)
    texts, _ = await run_request(orchestrator)
    assert texts == ["a", "b"]
    assert prefill.calls == [("r1", NX)]


async def test_the_decode_router_sends_a_nixl_read_past_a_slow_pair_and_books_the_links():
    from types import SimpleNamespace
    from typing import Any

    from app.flow.records import GenerateRequest
    from app.routing.decode_affinity import DecodeAffinity
    from deployments.request_routers import KVCapacityRouter

    class Router(KVCapacityRouter):
        def _queue_lens(self, replicas: Any) -> dict[str, int]:
            return {}  # Serve's queue-length cache needs a running Serve

    def replica(unique_id: str, stats: dict[str, Any]) -> Any:
        return SimpleNamespace(replica_id=SimpleNamespace(unique_id=unique_id), routing_stats=stats)

    def pending(request: GenerateRequest) -> Any:
        return SimpleNamespace(args=(request,))

    router = object.__new__(Router)  # Serve's constructor needs a running Serve
    router.affinity = DecodeAffinity()
    router.links = LinkBook()
    # d1 has the more free KV cache, but its NIXL link from p1 is slow.
    d1 = replica("d1", {"kv_cache_usage": 0.1, "nixl_links": ["p1"], "slow_links": ["p1"]})
    d2 = replica("d2", {"kv_cache_usage": 0.5, "nixl_links": ["p1"], "slow_links": []})
    nixl = GenerateRequest("r1", [1, 2, 3], None, kv_transfer_params={"x": 1}, kv_source="p1")
    assert await router.choose_replicas([d1, d2], pending(nixl)) == [[d2], [d1]]
    # Without a NIXL read (a local prefill) capacity decides as before.
    local = GenerateRequest("r2", [4, 5, 6], None)
    assert await router.choose_replicas([d1, d2], pending(local)) == [[d1], [d2]]
    assert not router.links.nixl_slow_everywhere()  # p1 -> d2 is fast
