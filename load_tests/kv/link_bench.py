"""KV over a shaped link: transfer time and TTFT vs KV bytes, next to the calculator.

    scripts/testnet up && scripts/testnet exec a .venv/bin/python -m load_tests.kv.link_bench;
    scripts/testnet down                                  (or: make bench-link)

Prefill runs on test host a, decode on host b (UCX over TCP on the veth link). For each
link rate (token-bucket shaping of host a's egress, which carries the KV; ``none`` =
unshaped) and each prompt length, sends ``--repeats`` greedy requests (new prompts, 2
output tokens) and records: the KV bytes moved, NIXL's own transfer time (from the decode
engine's ``vllm:nixl_xfer_time_seconds``), the decode's first-token time and the client
TTFT; next to what ``app.planning.kv_size`` predicts at line rate and with TCP efficiency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from app.config import TransportConfig
from app.planning.kv_size import shape_from_model, transfer_seconds, wire_seconds
from load_tests.client.stream_bench import one_request
from load_tests.systems.testnet_cluster import TestnetCluster, shape, two_host_args


def _xfer(handle: Any) -> tuple[float, float]:
    counters = handle.stats.remote().result().counters
    return (
        counters.get("vllm:nixl_xfer_time_seconds_sum", 0.0),
        counters.get("vllm:nixl_xfer_time_seconds_count", 0.0),
    )


def measure(url: str, decode: Any, length: int, repeats: int, rng: random.Random) -> dict[str, Any]:
    rows = []
    for _ in range(repeats):
        prompt = [rng.randrange(3, 1000) for _ in range(length)]
        before = _xfer(decode)
        timing = asyncio.run(_one(url, prompt))
        after = _xfer(decode)
        server = timing.server or {}
        count = after[1] - before[1]
        rows.append(
            {
                "ttft_ms": timing.ttft * 1000,
                "kv_bytes": server.get("kv_bytes", 0),
                "nixl_xfer_ms": (after[0] - before[0]) * 1000 if count else float("nan"),
                "decode_first_token_ms": server.get("decode_first_token_ms", float("nan")),
                "prefill_ms": server.get("prefill_ms", float("nan")),
                "transport": server.get("kv_transport"),
            }
        )
    return {
        key: statistics.median(r[key] for r in rows)
        for key in ("ttft_ms", "kv_bytes", "nixl_xfer_ms", "decode_first_token_ms", "prefill_ms")
    } | {"transports": sorted({str(r["transport"]) for r in rows})}


async def _one(url: str, prompt: list[int]) -> Any:
    async with httpx.AsyncClient(timeout=120) as client:
        return await one_request(client, url, None, prompt, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", nargs="*", default=["none", "40gbit", "10gbit", "1gbit"])
    parser.add_argument("--lengths", nargs="*", type=int, default=[256, 768, 1536])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-progress-thread", action="store_true", help="run without NIXL's progress thread"
    )
    parser.add_argument(
        "--progress-poll-ms",
        type=int,
        default=TransportConfig().nixl_progress_poll_ms,
        help="longest pause of NIXL's progress thread between polls (0: busy polling)",
    )
    parser.add_argument("--out", default="load_tests/results/link_bench.json")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    per_token = shape_from_model("builtin:tiny-llama").bytes_per_token()
    results = []
    with TestnetCluster(("a", "b")) as cluster:
        app_args = two_host_args("nixl")
        app_args["transport"]["nixl_progress_thread"] = not args.no_progress_thread
        app_args["transport"]["nixl_progress_poll_ms"] = args.progress_poll_ms
        url = cluster.deploy(app_args, "splitserve", "/")
        from ray import serve

        decode = serve.get_deployment_handle("Decode", app_name="splitserve")
        asyncio.run(_one(url, [5] * 300))  # warm-up: NIXL handshake
        for rate in args.rates:
            shape("a", "off" if rate == "none" else rate)
            time.sleep(0.5)
            for length in args.lengths:
                row = measure(url, decode, length, args.repeats, rng)
                gbps = None if rate == "none" else float(rate.removesuffix("gbit"))
                nbytes = row["kv_bytes"] or length * per_token
                row |= {
                    "rate": rate,
                    "prompt_tokens": length,
                    "predicted_wire_ms": wire_seconds(nbytes, gbps) * 1000 if gbps else None,
                    "predicted_tcp_ms": transfer_seconds(nbytes, gbps, "tcp") * 1000
                    if gbps
                    else None,
                }
                results.append(row)
                print(json.dumps(row), flush=True)
        shape("a", "off")
    out = {
        "conditions": {
            "hosts": "2 network namespaces, veth through a bridge, 198.18.0.1 -> .2",
            "ucx_tls": "tcp",
            "nixl_progress_thread": not args.no_progress_thread,
            "nixl_progress_poll_ms": args.progress_poll_ms,
            "shaping": "tbf on host a egress (the KV direction); no netem (kernel lacks it)",
            "repeats": args.repeats,
            "model": "builtin:tiny-llama",
            "kv_bytes_per_token": per_token,
        },
        "rows": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
