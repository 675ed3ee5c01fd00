"""Each of the advisor's five checks (app/planning/checks.py) on both sides of its
threshold, and the summary."""

import pytest

from app.planning.checks import (
    Workload,
    accelerator_count,
    advise,
    decode_share,
    kv_bytes_vs_network,
    network_kind,
    prefix_hit_rate,
)

# A workload every check favours: long decodes, modest KV, fast RDMA, many GPUs.
GOOD = Workload(
    prompt_tokens=2048,
    output_tokens=512,
    kv_bytes_per_token=131_072,
    decode_share=0.85,
    prefix_hit_rate=0.2,
    accelerators=32,
    network_gbps=400,
    network="rdma",
)


def _with(**changes):
    return Workload(**{**GOOD.__dict__, **changes})


def test_good_workload_disaggregates():
    advice = advise(GOOD)
    assert [c.verdict for c in advice.checks] == ["favours"] * 5
    assert advice.recommendation == "disaggregate"


def test_decode_share_threshold():
    assert decode_share(_with(decode_share=0.70)).verdict == "favours"
    assert decode_share(_with(decode_share=0.69)).verdict == "against"


def test_kv_bytes_hurt_only_when_large_and_network_slow():
    big = 600e6 / 2048  # bytes per token for 600 MB per 2048-token prompt
    assert kv_bytes_vs_network(_with(kv_bytes_per_token=int(big), network_gbps=50)).verdict == (
        "against"
    )
    assert kv_bytes_vs_network(_with(kv_bytes_per_token=int(big), network_gbps=100)).verdict == (
        "favours"
    )
    small = 400e6 / 2048
    assert kv_bytes_vs_network(_with(kv_bytes_per_token=int(small), network_gbps=50)).verdict == (
        "favours"
    )
    check = kv_bytes_vs_network(_with(kv_bytes_per_token=327_680, prompt_tokens=4096))
    assert check.value == 1_342_177_280
    assert "ms per transfer" in check.why


def test_prefix_hit_rate_threshold():
    assert prefix_hit_rate(_with(prefix_hit_rate=0.79)).verdict == "favours"
    assert prefix_hit_rate(_with(prefix_hit_rate=0.80)).verdict == "against"


def test_accelerator_threshold():
    assert accelerator_count(_with(accelerators=16)).verdict == "favours"
    assert accelerator_count(_with(accelerators=15)).verdict == "against"


def test_network_kind():
    assert network_kind(_with(network="rdma")).verdict == "favours"
    assert network_kind(_with(network="tcp")).verdict == "against"


def test_summary_levels():
    assert advise(_with(accelerators=2)).recommendation == "measure first"
    bad = _with(accelerators=2, network="tcp", decode_share=0.3)
    advice = advise(bad)
    assert advice.recommendation == "stay colocated"
    assert len(advice.reasons) == 3
    assert "recommendation: stay colocated" in advice.table()
    assert advice.to_json()["checks"][0]["name"] == "decode share of time"


def test_bad_workloads_are_refused():
    with pytest.raises(ValueError):
        _with(decode_share=1.5)
    with pytest.raises(ValueError):
        _with(accelerators=0)


def test_json_names_the_unit_each_raw_value_is_in():
    """The table shows a share as "94%" and a size as "0.8 MB"; the JSON keeps the raw
    value (0.94, 839680.0), so its unit must say fraction and bytes, not % and MB."""
    checks = {c["name"]: c for c in advise(_with(accelerators=2)).to_json()["checks"]}
    share = checks["decode share of time"]
    assert share["unit"] == "fraction" and 0 <= share["value"] <= 1
    size = checks["KV bytes per request"]
    assert size["unit"] == "bytes" and size["threshold"] == 500e6
    assert checks["network kind"]["unit"] == "1 = RDMA, 0 = TCP"
