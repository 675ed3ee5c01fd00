"""`splitserve kv | advise | plan`: tables, JSON, and clear errors."""

import json

import pytest

from app.cli import main
from app.planning.engine_profile import EngineProfile
from app.planning.mix import parse_mix
from tests.unit.model_configs import LLAMA_70B


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))
    return str(tmp_path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_kv_reports_the_seed_numbers(capsys, model_dir):
    code, out, _ = run(capsys, "kv", "--model", model_dir, "--prompt-tokens", "4096", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["bytes_per_token"] == 327_680
    assert result["bytes_per_request"] == 1_342_177_280
    assert round(result["wire_ms"]) == 107


def test_advise_from_figures_prints_every_check(capsys, model_dir):
    argv = ["advise", "--model", model_dir, "--prompt-tokens", "4096", "--output-tokens", "64"]
    argv += ["--ttft-ms", "900", "--tpot-ms", "20", "--accelerators", "4", "--network", "tcp"]
    argv += ["--network-gbps", "25"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    for name in ("decode share", "KV bytes per request", "prefix-cache", "accelerators"):
        assert name in out
    assert "recommendation: stay colocated" in out
    code, out, _ = run(capsys, *argv, "--json")
    result = json.loads(out)
    assert result["recommendation"] == "stay colocated"
    assert result["workload"]["decode_share"] == pytest.approx(63 * 20 / (900 + 63 * 20))


def test_advise_from_a_load_test_result(capsys, tmp_path, model_dir):
    run_ = {
        "ttft_ms": {"p50": 100.0},
        "e2e_ms": {"p50": 1000.0},
        "prompt_tokens_mean": 1000.0,
        "output_tokens_mean": 200.0,
        "prefix_hit_rate": 0.9,
    }
    path = tmp_path / "loadgen.json"
    path.write_text(json.dumps({"runs": [run_]}))
    code, out, _ = run(
        capsys, "advise", "--result", str(path), "--model", model_dir, "--accelerators", "64",
        "--json",
    )  # fmt: skip
    result = json.loads(out)
    assert code == 0
    assert result["workload"]["decode_share"] == pytest.approx(0.9)
    assert result["workload"]["prefix_hit_rate"] == 0.9
    assert result["recommendation"] == "measure first"  # only the prefix hit rate is against


def test_advise_errors_name_what_is_missing(capsys, tmp_path):
    code, _, err = run(capsys, "advise", "--prompt-tokens", "10")
    assert code == 2 and "--output-tokens" in err
    code, _, err = run(capsys, "advise", "--prompt-tokens", "10", "--output-tokens", "5")
    assert code == 2 and "--decode-share" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = run(capsys, "advise", "--result", str(bad))
    assert code == 2 and "runs[0]" in err


def _compare_row(goodput, tried, mixed_p99, c16, over_ttft=0.0):
    miss = {"requests": 40, "over_ttft": over_ttft, "over_tpot": 0.0, "ttft_p90_ms": 450.0,
            "tpot_p90_ms": 6.0}  # fmt: skip
    return {
        "startup_s": 40.0, "idle_cpu_total_pct": 15.0, "pss_total_mib": 5000,
        "c1": {"ttft_ms": {"p50": 30.0}, "tpot_ms": {"p50": 3.0}},
        "c16": {"output_tok_per_s": c16},
        "mixed": {"short_ttft_ms": {"p99": mixed_p99}, "short_tpot_ms": {"p50": 5.0},
                  "short_itl_ms": {"p99": 40.0}},
        "goodput_req_per_s": goodput,
        "goodput_tried": tried,
        "goodput_breakdown": [{"rate": rate, "failed": 0, "short": miss, "long": miss}
                              for rate, _ in tried],
    }  # fmt: skip


def test_advise_reads_a_compare_run_and_says_which_layout_won_and_why(capsys, tmp_path):
    rows = {
        "splitserve disaggregated": _compare_row(6.0, [(4, 0.97), (8, 0.5), (6, 0.93)], 214, 1402,
                                                 over_ttft=0.4),
        "splitserve colocated": _compare_row(9.0, [(4, 1.0), (8, 0.95), (16, 0.2), (12, 0.6),
                                                   (10, 0.8), (9, 0.91)], 141, 1578),
    }  # fmt: skip
    path = tmp_path / "compare.json"
    conditions = {"slo_ttft_ms": 300, "slo_tpot_ms": 20, "slo_attainment": 0.9, "cpu": "EPYC"}
    path.write_text(json.dumps({"conditions": conditions, "rows": rows}))
    code, out, _ = run(capsys, "advise", "--result", str(path))
    assert code == 0
    assert out.startswith("winner: splitserve colocated (by goodput at the SLO")
    code, out, _ = run(capsys, "advise", "--result", str(path), "--json")
    answer = json.loads(out)
    assert answer["winner"] == "splitserve colocated"
    why = answer["reasons"][0]
    # How far behind, and where it missed at the lowest rate it failed (8 req/s).
    assert why.startswith("splitserve disaggregated: goodput 6 req/s, 0.67x the winner's")
    assert "at 8 req/s: 40% of short requests over the TTFT target (p90 450 ms)" in why
    assert "TTFT p99 214 vs 141 ms" in why
    assert answer["reasons"][1].startswith("splitserve colocated itself: at 10 req/s")


def test_advise_ranks_a_compare_run_without_goodput_by_its_tail(capsys, tmp_path):
    rows = {"a": _compare_row(None, [], 300, 1000), "b": _compare_row(None, [], 150, 900)}
    path = tmp_path / "compare.json"
    path.write_text(json.dumps({"conditions": {}, "rows": rows}))
    code, out, _ = run(capsys, "advise", "--result", str(path), "--json")
    answer = json.loads(out)
    assert code == 0 and answer["winner"] == "b" and "no goodput" in answer["ranked_by"]
    missing = tmp_path / "missing.json"
    code, _, err = run(capsys, "advise", "--result", str(missing))
    assert code == 2 and "no such file" in err


def test_plan_ranks_topologies(capsys, tmp_path):
    # Prefill nearly free (1 us per token): no interference to remove, so a prefill pool
    # only takes an accelerator away from decoding, and colocated must win clearly.
    profile = EngineProfile(prefill=[(0, 0.0), (2000, 0.002)], decode=[(1, 0.002), (64, 0.01)])
    profile.save(tmp_path / "p.json")
    code, out, _ = run(
        capsys, "plan", "--profile", str(tmp_path / "p.json"), "--accelerators", "2",
        "--requests", "60", "--seconds", "5", "--json",
    )  # fmt: skip
    assert code == 0
    plans = json.loads(out)["plans"]
    assert {p["topology"] for p in plans} == {"1P:1D", "colocated x2"}
    best, split = plans
    assert best["topology"] == "colocated x2"
    assert best["goodput_per_accelerator"] > 1.5 * split["goodput_per_accelerator"]


def test_plan_charges_the_front_end_on_shared_cores(capsys, tmp_path):
    # A front end that needs 2 ms of CPU per request and 1 ms per chunk, on the two cores
    # the engines use: every split serves less than when it has cores of its own.
    profile = EngineProfile(prefill=[(0, 0.0), (2000, 0.002)], decode=[(1, 0.002), (64, 0.01)])
    profile.save(tmp_path / "p.json")
    fit = {"request_s": 0.002, "remote_request_s": 0.001, "chunk_s": 0.001}
    (tmp_path / "fit.json").write_text(json.dumps(fit))
    common = ["plan", "--profile", str(tmp_path / "p.json"), "--accelerators", "2",
              "--requests", "60", "--seconds", "5", "--json"]  # fmt: skip

    def goodputs(*extra):
        code, out, _ = run(capsys, *common, *extra)
        assert code == 0
        return {p["topology"]: p["goodput_req_per_s"] for p in json.loads(out)["plans"]}

    free = goodputs()
    shared = goodputs("--frontend", str(tmp_path / "fit.json"), "--cores", "2")
    for topology, rate in shared.items():
        assert rate < free[topology], (topology, rate, free[topology])


def test_advise_says_what_it_assumed_and_which_figures_are_defaults(capsys, model_dir):
    argv = ["advise", "--model", model_dir, "--prompt-tokens", "4096", "--output-tokens", "64"]
    argv += ["--ttft-ms", "900", "--tpot-ms", "20"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assumed = out.split("assumes:")[1]
    assert f"model: {model_dir}, 327,680 KV bytes per token" in assumed
    assert "accelerators: 8 (a default: the command line named none)" in assumed
    assert "network: 100 Gb/s RDMA (a default" in assumed
    code, out, _ = run(capsys, *argv, "--accelerators", "2", "--network", "tcp", "--json")
    assumes = json.loads(out)["assumes"]
    assert assumes["accelerators"] == "2"
    assert assumes["network"] == "100 Gb/s TCP (a default: the command line named none)"


def test_plan_says_which_engine_model_hardware_and_network_it_assumed(capsys, tmp_path):
    profile = EngineProfile(
        prefill=[(0, 0.0), (2000, 0.002)],
        decode=[(1, 0.002), (64, 0.01)],
        conditions={"model": "builtin:tiny-llama", "cpu": "Some CPU"},
    )
    profile.save(tmp_path / "p.json")
    common = ["plan", "--profile", str(tmp_path / "p.json"), "--accelerators", "2",
              "--requests", "40", "--seconds", "3"]  # fmt: skip
    code, out, _ = run(capsys, *common)
    assert code == 0
    assert "model builtin:tiny-llama, cpu Some CPU" in out
    assert "network: none: KV transfers take no time" in out
    assert "accelerators: 2, every layout on the same number" in out
    code, out, _ = run(capsys, *common, "--link-gbps", "25", "--json")
    assumes = json.loads(out)["assumes"]
    assert assumes["network"] == "a 25 Gb/s link for every transfer"
    assert "KV bytes per token" in assumes["model"]


def test_mix_parsing():
    assert parse_mix("128:128:0.8,1536:8:0.2") == [(128, 128, 0.8), (1536, 8, 0.2)]
    for bad in ("128:128", "128:128:0.5", "0:1:1", "a:b:c"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_plan_models_the_local_prefill_threshold(capsys, tmp_path):
    # Each remote prefill costs 70 ms more than a local one (the hops), over a TTFT
    # target of 60 ms: with every prompt remote no request meets it; with short prompts
    # prefilled on decode (the default config's 512), the 95% of 128-token ones do.
    profile = EngineProfile(prefill=[(0, 0.0), (2000, 0.02)], decode=[(1, 0.002), (64, 0.01)])
    profile.disaggregated_overhead_s = 0.07
    profile.save(tmp_path / "p.json")
    code, out, err = run(
        capsys, "plan", "--profile", str(tmp_path / "p.json"), "--accelerators", "2",
        "--requests", "60", "--seconds", "5", "--slo-ttft-ms", "60", "--slo-tpot-ms", "50",
        "--local-prefill-below-tokens", "0", "512", "--mix", "128:128:0.95,1536:8:0.05",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    plans = {p["topology"]: p for p in json.loads(out)["plans"]}
    assert set(plans) == {"1P:1D", "1P:1D (< 512 local)", "colocated x2"}
    assert plans["1P:1D"]["goodput_req_per_s"] == 0
    assert plans["1P:1D (< 512 local)"]["goodput_req_per_s"] > 1
