"""``splitserve replay`` against the running app: a short window of the shipped Azure
trace, open loop; every request answered with the stated output, its path reported."""

from __future__ import annotations

import json


def test_a_window_of_the_azure_trace_is_replayed_open_loop(apps, tmp_path):
    from app.cli import main

    out = tmp_path / "replay.json"
    code = main(
        [
            "replay",
            "--url", apps.disaggregated,
            "--start-s", "600",
            "--duration-s", "6",
            "--rate-scale", "2",
            "--length-scale", "0.4",
            "--output-scale", "0.1",
            "--max-prompt-tokens", "1500",
            "--slo-ttft-ms", "5000",
            "--slo-tpot-ms", "1000",
            "--out", str(out),
            "--json",
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    records = report["records"]
    assert report["requests"] == len(records) > 5
    assert report["answered"] == len(records), report["statuses"]
    for record in records:
        assert len(record["token_times_s"]) == record["output_tokens"], record
        assert record["token_times_s"] == sorted(record["token_times_s"])
    assert report["slo_attainment"] == 1.0 and report["fluidity_index"] > 0.9
    assert set(report["paths"]) <= {"local", "nixl", "object_store", "recompute"}
    assert "nixl" in report["paths"]  # prompts past local_prefill_below_tokens go remote
    assert report["window"]["rate_scale"] == 2.0


def test_the_same_window_is_replayed_against_vllms_own_server(tmp_path):
    """`replay` is a client for any OpenAI-compatible server: against vLLM's own, every
    request is answered with its stated output and each token's time; the path taken is
    ``unknown`` (vLLM's server does not say)."""
    from app.cli import main
    from tests.harness.vllm_server import vllm_server

    out = tmp_path / "replay_vllm.json"
    with vllm_server(8012, cores="0") as url:
        code = main(
            [
                "replay",
                "--url", url,
                "--start-s", "600",
                "--duration-s", "6",
                "--rate-scale", "2",
                "--length-scale", "0.4",
                "--output-scale", "0.1",
                "--max-prompt-tokens", "1500",
                "--slo-ttft-ms", "5000",
                "--slo-tpot-ms", "1000",
                "--out", str(out),
                "--json",
            ]
        )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    records = report["records"]
    assert report["requests"] == len(records) > 5
    assert report["answered"] == len(records), report["statuses"]
    for record in records:
        assert len(record["token_times_s"]) == record["output_tokens"], record
        assert record["token_times_s"] == sorted(record["token_times_s"])
        assert record["sent"] and record["done"]
    assert report["slo_attainment"] == 1.0 and report["fluidity_index"] > 0.9
    # vLLM sends no `splitserve` field: the path is not known, and not guessed
    assert report["paths"] == {"unknown": len(records)}
