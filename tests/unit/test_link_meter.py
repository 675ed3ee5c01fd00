"""Each prefill-to-decode link's measured bandwidth (app.kv.link_meter)."""

from __future__ import annotations

import logging

import pytest

from app.kv.fallback import Transport
from app.kv.link_meter import MIN_BYTES, WEIGHT, Link, LinkMeter

MIB = 1 << 20


def _meter() -> tuple[LinkMeter, list[tuple[str, Transport, Link]]]:
    published: list[tuple[str, Transport, Link]] = []
    meter = LinkMeter(lambda p, t, link: published.append((p, t, Link(**vars(link)))))
    return meter, published


def test_small_transfers_and_recompute_measure_nothing():
    meter, published = _meter()
    meter.observe("p1", Transport.NIXL, MIN_BYTES - 1, 0.001)
    meter.observe("p1", Transport.RECOMPUTE, 8 * MIB, 0.001)
    meter.observe("p1", Transport.NIXL, 8 * MIB, 0.0)
    assert meter.links == {} and published == []


def test_bandwidth_is_a_weighted_mean_per_pair_and_transport():
    meter, published = _meter()
    meter.observe("p1", Transport.NIXL, 4 * MIB, 0.001)  # 4 MiB/ms
    meter.observe("p1", Transport.NIXL, 4 * MIB, 0.002)
    first, second = 4 * MIB / 0.001, 4 * MIB / 0.002
    link = meter.links[("p1", Transport.NIXL)]
    assert link.transfers == 2
    assert link.bytes_per_s == pytest.approx(WEIGHT * second + (1 - WEIGHT) * first)
    meter.observe("p2", Transport.NIXL, 2 * MIB, 0.001)
    assert meter.links[("p2", Transport.NIXL)].bytes_per_s == pytest.approx(2 * MIB / 0.001)
    assert published[-1][0] == "p2"


def test_nixl_slower_than_the_object_store_on_the_same_pair_is_flagged(caplog):
    meter, published = _meter()
    meter.observe("p1", Transport.OBJECT_STORE, 8 * MIB, 0.004)  # 2 MiB/ms
    meter.observe("p2", Transport.OBJECT_STORE, 8 * MIB, 0.004)
    meter.observe("p2", Transport.NIXL, 8 * MIB, 0.002)  # healthy: faster
    with caplog.at_level(logging.WARNING, logger="splitserve.links"):
        meter.observe("p1", Transport.NIXL, 8 * MIB, 0.020)  # 0.4 MiB/ms: lost its path
        meter.observe("p1", Transport.NIXL, 8 * MIB, 0.020)
    assert meter.links[("p1", Transport.NIXL)].slow
    assert not meter.links[("p2", Transport.NIXL)].slow
    warnings = [r for r in caplog.records if "p1" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not per transfer
    assert ("p1", Transport.NIXL) in {(p, t) for p, t, link in published if link.slow}


def test_a_gone_prefill_replica_is_forgotten_and_gauges_are_set_again():
    meter, published = _meter()
    meter.observe("p1", Transport.NIXL, 8 * MIB, 0.002)
    meter.observe("p2", Transport.NIXL, 8 * MIB, 0.002)
    meter.forget("p1")
    published.clear()
    meter.refresh_gauges()
    assert [p for p, _, _ in published] == ["p2"]
