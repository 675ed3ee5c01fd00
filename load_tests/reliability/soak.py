"""Soak: N concurrent streams for M minutes with random client disconnects.

    scripts/loopback-netns .venv/bin/python -m load_tests.reliability.soak --streams 8 --minutes 5

Starts the app from ``--config`` in its own Ray cluster on loopback, then keeps
``--streams`` clients busy: each sends a streamed completion (random prompt and output
lengths) and, with probability ``--disconnect``, hangs up after a few events. Reports
requests ok / failed / dropped, each engine replica's RSS at start and end, and whether
any KV block is still held when the load stops. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx

from load_tests.client.sse import sse_data
from load_tests.systems.local_app import LocalApp

POOLS = ("Prefill", "Decode")


async def client_loop(
    url: str, seed: int, until: float, disconnect_p: float, counts: dict[str, int]
) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=120) as client:
        while time.monotonic() < until:
            prompt = [rng.randrange(3, 1000) for _ in range(rng.randint(8, 600))]
            body = {
                "prompt": prompt,
                "max_tokens": rng.randint(16, 256),
                "temperature": 0.8,
                "stream": True,
            }
            drop_after = rng.randint(1, 20) if rng.random() < disconnect_p else None
            try:
                async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
                    if resp.status_code != 200:
                        counts["failed"] += 1
                        continue
                    events = 0
                    error = False
                    async for data in sse_data(resp):
                        if data.startswith('{"error"'):
                            error = True
                        events += 1
                        if drop_after is not None and events >= drop_after:
                            break
                    if drop_after is not None and events >= drop_after:
                        counts["dropped"] += 1
                    elif error:
                        counts["failed"] += 1
                    else:
                        counts["ok"] += 1
            except httpx.HTTPError:
                counts["failed"] += 1


def replica_snapshot(app: LocalApp) -> dict[str, Any]:
    return {name: app.handle(name).process_info.remote().result() for name in POOLS}


def blocks_free(app: LocalApp, settle_s: float) -> dict[str, bool]:
    deadline = time.monotonic() + settle_s
    result = {}
    for name in POOLS:
        free = False
        while not free and time.monotonic() < deadline:
            free = bool(app.handle(name).all_blocks_free.remote().result())
            if not free:
                time.sleep(1)
        result[name] = free
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--disconnect", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle-s", type=float, default=60.0)
    parser.add_argument("--out", default="load_tests/results/soak.json")
    args = parser.parse_args()

    with LocalApp(args.config) as app:
        start = replica_snapshot(app)
        counts = {"ok": 0, "failed": 0, "dropped": 0}
        until = time.monotonic() + args.minutes * 60

        async def run() -> None:
            await asyncio.gather(
                *(
                    client_loop(app.url, args.seed + i, until, args.disconnect, counts)
                    for i in range(args.streams)
                )
            )

        started = time.monotonic()
        asyncio.run(run())
        elapsed = time.monotonic() - started
        free = blocks_free(app, args.settle_s)
        end = replica_snapshot(app)

    result = {
        "conditions": {
            "config": args.config,
            "streams": args.streams,
            "minutes": args.minutes,
            "disconnect_probability": args.disconnect,
            "seed": args.seed,
        },
        "elapsed_s": elapsed,
        "requests": counts,
        "rss_mib": {
            name: {
                "start": start[name]["rss_bytes"] / 2**20,
                "end": end[name]["rss_bytes"] / 2**20,
            }
            for name in POOLS
        },
        "all_kv_blocks_free_at_end": free,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
