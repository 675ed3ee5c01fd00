"""Soak under fire: open-loop load at a share of capacity, a decode replica killed on a timer.

    scripts/loopback-netns .venv/bin/python -m load_tests.reliability.fault_soak --minutes 30 \
        --load 0.8 --kill-every-min 5 [--out docs/results/fault_soak.json]

Starts the app (``--config``, with ``--decode-replicas`` decode replicas so that one
serves while a killed one is replaced), measures its capacity (8 clients in a closed
loop, 256 prompt / 64 output tokens, as :mod:`load_tests.reliability.overload`), then sends Poisson
arrivals of the same requests at ``--load`` times that capacity for ``--minutes``, and
every ``--kill-every-min`` ``ray.kill``\\ s the decode replica with the most requests
ongoing (Serve starts a new one). Records, for every request, how it ended (completed,
or its HTTP status / error event) and how long it took against its deadline; the app's
memory (RSS by process group) every minute; ``/dev/shm`` before the app started and
after it stopped; and whether any KV block is held once the load has stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from app.config import AppConfig
from load_tests.client.stats import summarize
from load_tests.client.stream_bench import RequestFailed, one_request
from load_tests.reliability.migration_bench import kill_busiest_decode
from load_tests.reliability.overload import arrivals, capacity
from load_tests.systems.local_app import LocalApp, config_args, merge
from load_tests.systems.process_usage import memory_by_group
from load_tests.systems.run_conditions import machine

ENGINE_GROUPS = ("engine core", "Prefill replica", "Decode replica", "Ingress replica")


def shm_files() -> set[str]:
    return set(os.listdir("/dev/shm"))


async def open_loop(
    url: str, rate: float, seconds: float, deadline_s: float, seed: int
) -> list[dict[str, Any]]:
    """Poisson arrivals at ``rate`` for ``seconds``; how each request ended, and when."""
    rng = random.Random(seed)
    ends: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=None)
    # The client waits past the server's deadline: a request the server lets hang shows.
    async with httpx.AsyncClient(timeout=deadline_s + 60, limits=limits) as client:

        async def send(due: float, prompt: list[int], max_tokens: int) -> None:
            end: dict[str, Any] = {"at_s": round(due - began, 1)}
            started = time.perf_counter()
            try:
                timing = await one_request(client, url, None, prompt, max_tokens)
                end["outcome"] = "200" if timing.output_tokens == max_tokens else "short"
                end["ttft_s"] = timing.ttft
                end["migrated"] = bool((timing.server or {}).get("migrations"))
            except RequestFailed as exc:
                end["outcome"] = str(exc.status) if exc.status else "error event"
                end["error"] = str(exc)[:200]
            except httpx.HTTPError as exc:
                end["outcome"] = type(exc).__name__
            end["elapsed_s"] = time.perf_counter() - started
            ends.append(end)

        began = time.perf_counter()
        await arrivals(rate, seconds, rng, send)
    return ends


def blocks_free(app: LocalApp, pool: str, replicas: int, settle_s: float) -> bool:
    """Every replica of ``pool`` holds no KV block (asked enough times to reach each)."""
    deadline = time.monotonic() + settle_s
    handle = app.handle(pool)
    while time.monotonic() < deadline:
        if all(handle.all_blocks_free.remote().result() for _ in range(4 * replicas)):
            return True
        time.sleep(1)
    return False


def memory_sample(started: float) -> dict[str, Any]:
    """The app's memory now (``time.monotonic()`` ``started`` the clock): its engine and
    replica processes' RSS, in all and by group (MiB), and the files in ``/dev/shm``."""
    memory = memory_by_group()
    return {
        "at_min": round((time.monotonic() - started) / 60, 2),
        "engines_mib": sum(memory.get(g, 0.0) for g in ENGINE_GROUPS),
        "by_group_mib": {k: round(v, 1) for k, v in memory.items()},
        "shm_files": len(shm_files()),
    }


def rss_change(samples: list[dict[str, Any]], skip_min: float) -> dict[str, float]:
    """The app's RSS (engine and replica processes) from the first sample after
    ``skip_min`` minutes (warm-up growth done) to the last: MiB and %."""
    steady = [s for s in samples if s["at_min"] >= skip_min] or samples
    first, last = steady[0]["engines_mib"], steady[-1]["engines_mib"]
    return {
        "from_mib": round(first, 1),
        "to_mib": round(last, 1),
        "change_pct": round(100 * (last - first) / first, 2) if first else 0.0,
        "min_mib": round(min(s["engines_mib"] for s in steady), 1),
        "max_mib": round(max(s["engines_mib"] for s in steady), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--decode-replicas", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=0.8, help="share of measured capacity")
    parser.add_argument("--kill-every-min", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=90.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/fault_soak.json")
    args = parser.parse_args()

    overrides = {"decode": {"num_replicas": args.decode_replicas}}
    config = AppConfig.model_validate(merge(config_args(args.config), overrides))
    deadline_s = config.ingress.request_timeout_s
    shm_before = shm_files()
    samples: list[dict[str, Any]] = []
    kills: list[dict[str, float]] = []
    with LocalApp(args.config, num_cpus=1 + args.decode_replicas, overrides=overrides) as app:
        rate = asyncio.run(capacity(app.url, random.Random(args.seed)))
        seconds = args.minutes * 60
        stop = threading.Event()
        started = time.monotonic()

        def sample() -> None:
            samples.append(memory_sample(started))

        def watch() -> None:
            next_kill = args.kill_every_min * 60
            while not stop.wait(60.0):
                sample()
                elapsed = time.monotonic() - started
                if elapsed >= next_kill and elapsed < seconds:
                    ongoing = kill_busiest_decode(app.name)
                    kills.append({"at_s": round(elapsed, 1), "ongoing": ongoing})
                    next_kill += args.kill_every_min * 60

        sample()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        ends = asyncio.run(open_loop(app.url, args.load * rate, seconds, deadline_s, args.seed))
        stop.set()
        watcher.join()
        sample()
        free = {
            "Prefill": blocks_free(app, "Prefill", 1, args.settle_s),
            "Decode": blocks_free(app, "Decode", args.decode_replicas, args.settle_s),
        }
    time.sleep(5)  # engine processes exit after the cluster
    shm_after = shm_files()

    outcomes: dict[str, int] = {}
    for end in ends:
        outcomes[end["outcome"]] = outcomes.get(end["outcome"], 0) + 1
    completed = [e for e in ends if e["outcome"] == "200"]
    result = {
        "conditions": {**vars(args), "machine": machine(), "deadline_s": deadline_s},
        "capacity_rps": round(rate, 3),
        "rate_rps": round(args.load * rate, 3),
        "sent": len(ends),
        "outcomes": outcomes,
        "migrated": sum(1 for e in completed if e.get("migrated")),
        "ttft_ms_completed": summarize([e["ttft_s"] for e in completed], 1000),
        "elapsed_s_max": round(max((e["elapsed_s"] for e in ends), default=0.0), 1),
        "past_deadline": sum(1 for e in ends if e["elapsed_s"] > deadline_s + 1),
        "errors": sorted({e.get("error", "") for e in ends if e.get("error")})[:10],
        "kills": kills,
        "rss": rss_change(samples, skip_min=5.0),
        "memory_samples": samples,
        "all_kv_blocks_free_at_end": free,
        "shm_new_files": sorted(shm_after - shm_before),
        "shm_gone_files": sorted(shm_before - shm_after),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "memory_samples"}, indent=2))


if __name__ == "__main__":
    main()
