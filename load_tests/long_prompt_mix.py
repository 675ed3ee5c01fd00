"""Where the long prompts' TTFT goes under the mixed load: the client's figure beside the
server's own (``splitserve`` field: TTFT and the prefill call).

    scripts/loopback-netns .venv/bin/python -m load_tests.long_prompt_mix \
        [--config serve_configs/default.yaml] [--rates 2 4] [--requests 100]

Starts the app from ``--config`` as ``load_tests.serving.compare`` does, warms it up, then sends
the compare harness's mix (80% 128-in/128-out, 20% 1,536-in/8-out, Poisson arrivals,
fresh prompts per rate) at each rate and reports, for the long prompts: the client's
TTFT, the server's TTFT and its prefill call (p50 and p90), the decisions taken and
each request's figures. Writes JSON to ``--out`` (docs/performance.md, section 14).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from load_tests.client.loadgen import run_at_rate
from load_tests.client.stats import percentile
from load_tests.client.workloads import mixed, rate_rng
from load_tests.serving.compare import splitserve, warm_up
from load_tests.systems.run_conditions import machine

FIELDS = ("decision", "ttft_ms", "prefill_ms", "first_token_from", "kv_transport")


def at_rate(url: str, rate: float, count: int, seed: int) -> dict[str, Any]:
    requests = mixed(rate_rng(seed, rate), count)
    timings, failures, _ = asyncio.run(run_at_rate(url, requests, rate, seed, progress=False))
    rows: list[dict[str, Any]] = [
        {"client_ttft_ms": round(t.ttft * 1000, 1), **{k: (t.server or {}).get(k) for k in FIELDS}}
        for t in timings
        if t.prompt_tokens > 128
    ]
    summary = {}
    for key in ("client_ttft_ms", "ttft_ms", "prefill_ms"):
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        summary[key] = {
            "p50": round(percentile(values, 50), 1) if values else None,
            "p90": round(percentile(values, 90), 1) if values else None,
        }
    return {
        "rate": rate,
        "long_requests": len(rows),
        "failed": len(failures),
        "long": summary,
        "decisions": sorted({f"{r['decision']}/{r['first_token_from']}" for r in rows}),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 4.0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--seed", type=int, default=77)
    parser.add_argument("--out", default="load_tests/results/long_prompt_mix.json")
    args = parser.parse_args()
    runs = []
    with splitserve(args.config) as url:
        asyncio.run(warm_up(url))
        for rate in args.rates:
            runs.append(at_rate(url, rate, args.requests, args.seed))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "rows"}), flush=True)
    result = {"conditions": {**vars(args), "machine": machine()}, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
