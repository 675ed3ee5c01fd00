"""NVIDIA's AIPerf against splitserve and vLLM's own server, beside this project's load
generator, on the same workload and SLO (``make bench-aiperf``).

    scripts/loopback-netns .venv/bin/python -m load_tests.serving.aiperf_bench \
        --aiperf .venv-aiperf/bin/aiperf

AIPerf runs from its own environment (``make bench-aiperf`` makes ``.venv-aiperf``; its
pins would change vLLM's and Ray's). For each system, one app start, then:

1. AIPerf, twice (polling ``/metrics``, its default, then not): ``--request-rate``
   Poisson arrivals of ``--requests`` streamed completions,
   ``--isl`` tokens in (synthetic text, stddev 0) and ``--osl`` out (``ignore_eos``),
   output counted by the server's usage, goodput at the SLO (TTFT and inter-token
   latency, AIPerf's per-request mean gap after the first token: TPOT here). AIPerf also
   collects the server's ``/metrics`` (enabled by default), and the report says which
   engine series it found there.
2. ``load_tests.client.loadgen``: the same rate, count and lengths (random token ids), the
   same SLO.

Writes ``load_tests/results/aiperf.json`` (AIPerf's own export included) and prints both
clients' figures side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
from pathlib import Path
from typing import Any

from app.model.source import resolve_model
from app.planning.goodput import SLO, add_slo_options, slo_from_options
from load_tests.client.loadgen import run_at_rate, summary
from load_tests.client.workloads import fixed
from load_tests.serving.compare import SYSTEMS, warm_up
from load_tests.systems.run_conditions import machine

SYSTEM_NAMES = ("splitserve disaggregated", "splitserve colocated", "vLLM OpenAI server")
# AIPerf's metric tags for TTFT and the per-request mean gap after the first token.
TTFT, ITL = "time_to_first_token", "inter_token_latency"


def aiperf_command(
    aiperf: str, url: str, args: argparse.Namespace, artifacts: Path, server_metrics: bool = True
) -> list[str]:
    return [
        aiperf,
        "profile",
        "--model-names", "tiny-llama",
        "--url", url,
        "--endpoint-type", "completions",
        "--streaming",
        "--tokenizer", resolve_model("builtin:tiny-llama"),
        "--prompt-input-tokens-mean", str(args.isl),
        "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", str(args.osl),
        "--prompt-output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true",
        "--use-server-token-count",
        "--request-rate", f"{args.rate:g}",
        "--arrival-pattern", "poisson",
        "--request-count", str(args.requests),
        "--warmup-request-count", "2",
        "--random-seed", str(args.seed),
        "--goodput", f"{TTFT}:{args.slo_ttft_ms:g} {ITL}:{args.slo_tpot_ms:g}",
        "--output-artifact-dir", str(artifacts),
        "--ui-type", "none",
        "--no-gpu-telemetry",
        *([] if server_metrics else ["--no-server-metrics"]),
    ]  # fmt: skip


def _load_export(artifacts: Path, suffix: str) -> dict[str, Any]:
    found = sorted(artifacts.rglob(f"*{suffix}"))
    loaded: dict[str, Any] = json.loads(found[-1].read_text()) if found else {}
    return loaded


def _metric(export: dict[str, Any], tag: str) -> dict[str, Any]:
    """One metric of AIPerf's JSON export (top level, or under ``records``)."""
    value = export.get(tag) or export.get("records", {}).get(tag) or {}
    return value if isinstance(value, dict) else {}


def aiperf_row(artifacts: Path) -> dict[str, Any]:
    export = _load_export(artifacts, "profile_export_aiperf.json")
    server = json.dumps(_load_export(artifacts, "server_metrics_export.json"))
    row: dict[str, Any] = {}
    for tag in (
        TTFT,
        ITL,
        "request_latency",
        "request_throughput",
        "output_token_throughput",
        "goodput",
        "request_count",
        "error_request_count",
    ):
        metric = _metric(export, tag)
        row[tag] = {k: metric[k] for k in ("unit", "avg", "p50", "p99") if k in metric}
    row["server_metrics"] = {
        name: name in server
        for name in (
            "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc",
            "splitserve_engine_busy_seconds",  # AIPerf names counters without _total
            'pool"',
        )
    }
    return row


def loadgen_row(url: str, args: argparse.Namespace) -> dict[str, Any]:
    requests = fixed(random.Random(args.seed), args.requests, args.isl, args.osl)
    timings, failures, wall = asyncio.run(
        run_at_rate(url, requests, args.rate, args.seed, progress=False)
    )
    slo = SLO(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000)
    result = summary(timings, failures, wall, slo)
    good = sum(1 for t in timings if slo.met_by(t))
    return {
        **{k: result[k] for k in ("ok", "failed", "wall_s", "output_tok_per_s", "slo_attainment")},
        "ttft_ms": result["ttft_ms"],
        "tpot_ms": result["tpot_ms"],
        "e2e_ms": result["e2e_ms"],
        "request_per_s": len(timings) / wall,
        "good_request_per_s": good / wall,
    }


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    print(f"{'system':<28}{'client':>9}{'TTFT p50':>10}{'TTFT p99':>10}"
          f"{'TPOT p50':>10}{'req/s':>8}{'good/s':>8}")  # fmt: skip
    for system, row in rows.items():
        for label, client in (("aiperf", "AIPerf"), ("aiperf_no_server_metrics", "AIPerf-")):
            a = row[label]
            print(
                f"{system:<28}{client:>9}{a[TTFT].get('p50', 0):>10.1f}"
                f"{a[TTFT].get('p99', 0):>10.1f}{a[ITL].get('p50', 0):>10.2f}"
                f"{a['request_throughput'].get('avg', 0):>8.2f}{a['goodput'].get('avg', 0):>8.2f}"
            )
            system = ""
        ours = row["loadgen"]
        print(
            f"{'':<28}{'loadgen':>9}{ours['ttft_ms']['p50']:>10.1f}{ours['ttft_ms']['p99']:>10.1f}"
            f"{ours['tpot_ms']['p50']:>10.2f}{ours['request_per_s']:>8.2f}"
            f"{ours['good_request_per_s']:>8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aiperf", default=".venv-aiperf/bin/aiperf")
    parser.add_argument("--systems", nargs="*", choices=SYSTEM_NAMES, default=list(SYSTEM_NAMES))
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--isl", type=int, default=128)
    parser.add_argument("--osl", type=int, default=128)
    add_slo_options(parser, ttft_ms=200.0, tpot_ms=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/aiperf.json")
    args = parser.parse_args()
    slo_from_options(args)  # fills args.slo_ttft_ms / slo_tpot_ms
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    for name in args.systems:
        artifacts = out.parent / "aiperf" / name.replace(" ", "_")
        with SYSTEMS[name]() as url:
            asyncio.run(warm_up(url))
            rows[name] = {}
            # AIPerf twice, with and without polling /metrics (its default is on), then
            # the project's client: the differences between them are measured, not guessed.
            for label, metrics in (("aiperf", True), ("aiperf_no_server_metrics", False)):
                command = aiperf_command(args.aiperf, url, args, artifacts / label, metrics)
                run = subprocess.run(command, capture_output=True, text=True, check=False)
                if run.returncode != 0:
                    tail = run.stderr[-4000:]
                    raise SystemExit(f"AIPerf failed on {name} ({run.returncode}):\n{tail}")
                rows[name][label] = aiperf_row(artifacts / label)
            rows[name]["loadgen"] = loadgen_row(url, args)
        conditions = {**vars(args), **machine(), "aiperf_command": command}
        out.write_text(json.dumps({"conditions": conditions, "rows": rows}, indent=2))
        print(f"{name}: done", flush=True)
    print_table(rows)


if __name__ == "__main__":
    main()
