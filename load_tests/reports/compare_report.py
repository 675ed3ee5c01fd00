"""The tables of docs/benchmarks.md's side-by-side section, from one
``load_tests.serving.compare`` run.

    python -m load_tests.reports.compare_report [load_tests/results/compare.json]

Prints Markdown: start-up and memory, the fixed-concurrency runs, the mixed load with
goodput, and each pool's utilization over every workload, so the tables and the plots
(``load_tests.reports.plots``) come from the same run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _pct(figures: dict[str, Any], key: str) -> str:
    value = figures.get(key)
    return "n/a" if value is None else f"{value:.0f}"


def tables(result: dict[str, Any]) -> str:
    rows: dict[str, dict[str, Any]] = result["rows"]
    out = [
        "| system | start s | idle CPU, % of one core | RSS MiB | PSS MiB |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        out.append(
            f"| {name} | {r['startup_s']:.1f} | {r['idle_cpu_total_pct']:.1f} | "
            f"{r['rss_total_mib']:,.0f} | {r['pss_total_mib']:,.0f} |"
        )
    out += [
        "",
        "| system | c=1 TTFT p50 / p99 ms | c=1 TPOT p50 ms | c=16 out tok/s "
        "| c=16 TTFT p50 ms | c=16 TPOT p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        c1, c16 = r["c1"], r["c16"]
        out.append(
            f"| {name} | {c1['ttft_ms']['p50']:.1f} / {c1['ttft_ms']['p99']:.1f} | "
            f"{c1['tpot_ms']['p50']:.2f} | {c16['output_tok_per_s']:,.0f} | "
            f"{c16['ttft_ms']['p50']:.1f} | {c16['tpot_ms']['p50']:.2f} |"
        )
    out += [
        "",
        "| system (mixed load, short requests) | TTFT p50 / p99 ms | ITL p50 / p99 ms "
        "| TPOT p50 ms | long TTFT p50 ms | failed | goodput req/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        m = r["mixed"]
        goodput = r.get("goodput_req_per_s")
        shown = "n/a" if goodput is None else f"{goodput:g}"
        runs = r.get("goodput_runs_req_per_s") or []
        if len(runs) > 1:  # the median of several searches, and their spread
            shown += f" ({min(runs):g} to {max(runs):g})"
        out.append(
            f"| {name} | {m['short_ttft_ms']['p50']:.1f} / {m['short_ttft_ms']['p99']:.1f} | "
            f"{m['short_itl_ms']['p50']:.1f} / {m['short_itl_ms']['p99']:.1f} | "
            f"{m['short_tpot_ms']['p50']:.2f} | {m['long_ttft_ms']['p50']:.1f} | "
            f"{m['failed']} | {shown} |"
        )
    out += [
        "",
        "| system | pool | c=1 busy / CPU % | c=16 busy / CPU % | mixed busy / CPU % |",
        "|---|---|---:|---:|---:|",
    ]
    for name, r in rows.items():
        pools = sorted({p for w in ("c1", "c16", "mixed") for p in r[w].get("pools", {})})
        for pool in pools:
            cells = []
            for workload in ("c1", "c16", "mixed"):
                figures = r[workload].get("pools", {}).get(pool, {})
                cells.append(f"{_pct(figures, 'busy_pct')} / {_pct(figures, 'cpu_pct')}")
            out.append(f"| {name} | {pool} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "load_tests/results/compare.json")
    print(tables(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
