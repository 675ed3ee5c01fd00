"""The prefix router's two sources side by side, with caches small enough to evict:
what was routed where (``router.prefix_source: routed``) against what the engines' KV
events say they hold (``kv_events``).

    make bench-prefix-index

Each source runs serve_configs/colocated_two.yaml (two replicas, one engine per core)
with every engine's cache capped at ``--cache-blocks`` blocks (``model.kv_cache_blocks``)
and two workloads, both of more distinct prefix than the two caches hold:

- ``shared_system``: ``--systems`` system prompts of ``--system-len`` tokens, each asked
  ``--questions`` short questions, shuffled, ``--concurrency`` at a time;
- ``multi_turn``: ``--conversations`` conversations of ``--turns`` turns, no session id;
  each turn's prompt is the history (every earlier part and answer, as the token ids the
  server returned) and ``--turn-len`` new tokens; the turns of all conversations
  interleaved, one conversation's in order.

Per workload: the prefix-cache hit rate (cached prompt tokens over prompt tokens, from
``usage.prompt_tokens_details``), TTFT p50/p95/p99, and the **wrong-guess rate**: the
share of requests the router sent to a replica for more cached tokens than its engine
found (``splitserve.routed_cached_tokens``, in whole engine blocks and at most the
prompt less its last token, which vLLM always computes, over ``cached_tokens``).
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

from load_tests.client.stats import summarize
from load_tests.serving.conversation_bench import one_turn
from load_tests.systems.local_app import LocalApp
from load_tests.systems.run_conditions import machine

SOURCES = ("routed", "kv_events")
ENGINE_BLOCK = 128  # the CPU backend's KV block, tokens


async def one(
    client: httpx.AsyncClient, url: str, prompt: list[int], output_len: int
) -> dict[str, Any]:
    """One streamed request (no session id): its TTFT, answer, and what the engine found
    cached beside what the router expected."""
    turn = await one_turn(client, url, prompt, output_len)
    report = turn["report"]
    routed = report.get("routed_cached_tokens")
    expected = None
    if routed is not None:
        most = (len(prompt) - 1) // ENGINE_BLOCK * ENGINE_BLOCK
        expected = min(int(routed) // ENGINE_BLOCK * ENGINE_BLOCK, most)
    return {
        "ttft_s": turn["ttft_s"],
        "answer": turn["answer"],
        "prompt_tokens": len(prompt),
        "cached": int(report.get("cached_tokens") or 0),
        "expected": expected,
        "engine": report.get("decode_engine"),
    }


async def shared_system(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = random.Random(args.seed)
    heads = [[rng.randrange(3, 1000) for _ in range(args.system_len)] for _ in range(args.systems)]
    prompts = [
        head + [rng.randrange(3, 1000) for _ in range(rng.randint(16, 48))]
        for head in heads
        for _ in range(args.questions)
    ]
    rng.shuffle(prompts)
    queue: asyncio.Queue[list[int]] = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    found: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=300) as client:

        async def worker() -> None:
            while not queue.empty():
                found.append(await one(client, url, queue.get_nowait(), args.output_len))

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return found


async def multi_turn(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = random.Random(args.seed + 1)
    histories = [
        [rng.randrange(3, 1000) for _ in range(args.first_len)] for _ in range(args.conversations)
    ]
    found: list[dict[str, Any]] = []
    locks = [asyncio.Lock() for _ in histories]
    order = [c for _ in range(args.turns) for c in range(args.conversations)]
    # Interleaved: each round of turns in another order, one conversation's in sequence.
    rounds = [order[i : i + args.conversations] for i in range(0, len(order), args.conversations)]
    for turns in rounds:
        rng.shuffle(turns)
    async with httpx.AsyncClient(timeout=300) as client:

        async def turn(c: int) -> None:
            async with locks[c]:
                result = await one(client, url, histories[c], args.output_len)
                found.append(result)
                histories[c] = [
                    *histories[c],
                    *result["answer"],
                    *(rng.randrange(3, 1000) for _ in range(args.turn_len)),
                ]

        async def limited(c: int, semaphore: asyncio.Semaphore) -> None:
            async with semaphore:
                await turn(c)

        for turns in rounds:
            semaphore = asyncio.Semaphore(args.concurrency)
            await asyncio.gather(*(limited(c, semaphore) for c in turns))
    return found


def measured(results: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = sum(r["prompt_tokens"] for r in results)
    cached = sum(r["cached"] for r in results)
    guessed = [r for r in results if r["expected"] is not None]
    wrong = [r for r in guessed if r["expected"] > r["cached"]]
    return {
        "requests": len(results),
        "hit_rate": round(cached / prompt, 4) if prompt else 0.0,
        "ttft_ms": summarize([r["ttft_s"] for r in results if r["ttft_s"] is not None], 1000),
        "routed_for_a_prefix": sum(1 for r in guessed if r["expected"]),
        "wrong_guesses": len(wrong),
        "wrong_guess_rate": round(len(wrong) / len(guessed), 4) if guessed else None,
        "wrong_guess_tokens": sum(r["expected"] - r["cached"] for r in wrong),
        "requests_per_engine": sorted(
            sum(1 for r in results if r["engine"] == e) for e in {r["engine"] for r in results}
        ),
    }


def run_source(source: str, args: argparse.Namespace) -> dict[str, Any]:
    overrides = {
        "model": {"kv_cache_blocks": args.cache_blocks},
        "router": {"prefix_source": source},
        "openai": {"enable_prompt_tokens_details": True},
    }
    row: dict[str, Any] = {"source": source}
    with LocalApp("serve_configs/colocated_two.yaml", overrides=overrides) as app:
        for name, workload in (("shared_system", shared_system), ("multi_turn", multi_turn)):
            started = time.perf_counter()
            results = asyncio.run(workload(app.url, args))
            row[name] = {**measured(results), "wall_s": round(time.perf_counter() - started, 1)}
            print(f"{source} {name}: {json.dumps(row[name])}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-blocks", type=int, default=96, help="per engine, 128 tokens")
    parser.add_argument("--systems", type=int, default=64)
    parser.add_argument("--system-len", type=int, default=512)
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--first-len", type=int, default=400)
    parser.add_argument("--turn-len", type=int, default=40)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/prefix_index.json")
    args = parser.parse_args()
    rows = [run_source(source, args) for source in SOURCES]
    result = {"conditions": {"machine": machine(), **vars(args)}, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    for row in rows:
        for name in ("shared_system", "multi_turn"):
            m = row[name]
            print(
                f"{row['source']:>9} {name:>13}: hit rate {m['hit_rate']:.3f}, TTFT p50/p99 "
                f"{m['ttft_ms']['p50']:.1f}/{m['ttft_ms']['p99']:.1f} ms, wrong guesses "
                f"{m['wrong_guesses']}/{m['requests']} ({m['wrong_guess_rate']})"
            )


if __name__ == "__main__":
    main()
