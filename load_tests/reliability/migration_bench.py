"""Request migration under fire: a steady load of streams, a decode replica killed every
minute, migration off and then on (docs/reliability.md).

    scripts/loopback-netns .venv/bin/python -m load_tests.reliability.migration_bench

For each mode it starts the app from ``--config`` with ``--decode-replicas`` decode
replicas in its own Ray cluster on loopback, keeps ``--clients`` closed-loop streaming
clients busy for ``--minutes``, and every ``--kill-every-s`` kills the decode replica with
the most requests ongoing through Ray's API (``ray.kill``; Serve starts a new one).
Reports, side by side:

- the failed-request rate (an HTTP error, an error event, or a short answer);
- the stall clients saw: each request's longest gap between chunks, p50/p99, for the
  requests that migrated and for all;
- the extra prefill work: the continuations' prompts (prompt plus tokens already
  streamed), as a share of all prompt tokens sent.

Writes JSON to ``--out``. Only loopback traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import ray

from deployments.replicas import replica_actor_names
from load_tests.client.stats import StreamTiming, summarize
from load_tests.client.stream_bench import RequestFailed, one_request
from load_tests.systems.local_app import LocalApp
from load_tests.systems.run_conditions import machine


def kill_busiest_decode(app_name: str) -> int:
    """``ray.kill`` the live Decode replica with the most requests ongoing; their count.

    A replica that does not answer (dying, or stopping in a redeploy) is not a target;
    with none that answers, RuntimeError."""
    ongoing: dict[str, int] = {}
    actors: dict[str, Any] = {}
    for name in replica_actor_names(app_name, "Decode"):
        try:
            actor = ray.get_actor(name, namespace="serve")
            count: Any = ray.get(actor.get_num_ongoing_requests.remote(), timeout=10)
        except Exception:
            continue
        ongoing[name], actors[name] = int(count), actor
    if not actors:
        raise RuntimeError("no live decode replica to kill")
    busiest = max(ongoing, key=lambda name: ongoing[name])
    ray.kill(actors[busiest], no_restart=True)
    return ongoing[busiest]


async def clients(
    url: str, count: int, until: float, args: argparse.Namespace
) -> tuple[list[StreamTiming], list[str]]:
    done: list[StreamTiming] = []
    failures: list[str] = []

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=args.request_timeout_s) as http:
            while time.monotonic() < until:
                prompt = [rng.randrange(3, 1000) for _ in range(rng.choice(args.prompt_lens))]
                try:
                    timing = await one_request(http, url, None, prompt, args.output_len)
                except (RequestFailed, httpx.HTTPError) as exc:
                    failures.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                if timing.output_tokens != args.output_len:
                    failures.append(f"short answer: {timing.output_tokens} tokens")
                    continue
                done.append(timing)

    await asyncio.gather(*(client(args.seed + i) for i in range(count)))
    return done, failures


def run_mode(args: argparse.Namespace, migration: bool) -> dict[str, Any]:
    overrides = {
        "decode": {"num_replicas": args.decode_replicas},
        "migration": {"enabled": migration},
    }
    with LocalApp(args.config, num_cpus=1 + args.decode_replicas, overrides=overrides) as app:
        until = time.monotonic() + args.minutes * 60
        kills: list[dict[str, float]] = []
        stop = threading.Event()

        def killer() -> None:
            started = time.monotonic()
            while not stop.wait(args.kill_every_s):
                if time.monotonic() >= until:
                    return
                kills.append(
                    {"at_s": time.monotonic() - started, "ongoing": kill_busiest_decode(app.name)}
                )

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        done, failures = asyncio.run(clients(app.url, args.clients, until, args))
        stop.set()
        thread.join()
    migrated = [t for t in done if (t.server or {}).get("migrations")]
    extra = sum(
        t.prompt_tokens + m["tokens_sent"] for t in migrated for m in (t.server or {})["migrations"]
    )
    sent = sum(t.prompt_tokens for t in done)
    total = len(done) + len(failures)
    return {
        "migration": migration,
        "requests": total,
        "completed": len(done),
        "failed": len(failures),
        "failed_rate": len(failures) / total if total else 0.0,
        "failures": failures[:10],
        "kills": kills,
        "migrated_requests": len(migrated),
        "longest_gap_ms_migrated": summarize(
            [max(t.chunk_gaps, default=0.0) for t in migrated], 1e3
        ),
        "longest_gap_ms_all": summarize([max(t.chunk_gaps, default=0.0) for t in done], 1e3),
        "extra_prefill_tokens": extra,
        "extra_prefill_share": extra / sent if sent else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--decode-replicas", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--prompt-lens", type=int, nargs="+", default=[64, 700])
    parser.add_argument("--output-len", type=int, default=200)
    parser.add_argument("--request-timeout-s", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--out", default="load_tests/results/migration.json")
    args = parser.parse_args()
    result = {
        "conditions": {**vars(args), "machine": machine()},
        "modes": [run_mode(args, mode == "on") for mode in args.modes],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
