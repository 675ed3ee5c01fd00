"""Multi-turn conversations, TTFT by turn: the disaggregated app beside colocated, one run.

    scripts/loopback-netns .venv/bin/python -m load_tests.serving.conversation_bench \
        --out load_tests/results/conversation.json

Each conversation starts with a ``--first-len``-token prompt; each later turn's prompt is
the whole history (every earlier prompt's new part and every answer, as token ids the
server returned) plus ``--turn-len`` new tokens, and carries the conversation's
``x-session-id``. Answers are ``--output-len`` tokens, greedy, streamed. Conversations
run ``--concurrency`` at a time, the turns of one conversation in order. Each system is
started in turn (``load_tests.serving.compare``'s systems) and sent the same conversations.

What it shows: whether a conversation's later turns, whose history the decode replica
already caches, are as fast as colocated's (issue target: TTFT at most 1.1x), and by
which decision (``splitserve.decision``: ``decode_cached`` prefills the new part on
decode; ``long_prompt`` sends it to the prefill pool). Only point it at loopback.
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

from load_tests.client.sse import sse_json
from load_tests.client.stats import summarize
from load_tests.systems.run_conditions import machine

SYSTEMS = (
    "splitserve disaggregated",
    "splitserve colocated",
    "splitserve disaggregated, every prompt remote",
)


async def one_turn(
    client: httpx.AsyncClient,
    url: str,
    prompt: list[int],
    output_len: int,
    session: str | None = None,
) -> dict[str, Any]:
    """One streamed turn: its TTFT, the answer's token ids and the server's report (with
    ``cached_tokens``); ``session``: the ``x-session-id`` it carries (None: none)."""
    body = {
        "model": "tiny-llama",
        "prompt": prompt,
        "max_tokens": output_len,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft = None
    answer: list[int] = []
    report: dict[str, Any] = {}
    headers = {"x-session-id": session} if session else {}
    async with client.stream(
        "POST", f"{url}/v1/completions", json=body, headers=headers
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {await response.aread()!r}")
        async for event in sse_json(response):
            if "error" in event:
                raise RuntimeError(event["error"]["message"])
            if event.get("usage"):
                report = dict(event.get("splitserve") or {})
                details = event["usage"].get("prompt_tokens_details") or {}
                report["cached_tokens"] = details.get("cached_tokens")
            for choice in event.get("choices", []):
                ids = choice.get("token_ids") or []
                if ids and ttft is None:
                    ttft = time.perf_counter() - started
                answer += ids
    if ttft is None or len(answer) != output_len:
        raise RuntimeError(f"turn answered {len(answer)} token ids, not {output_len}")
    return {"ttft_s": ttft, "answer": answer, "report": report}


async def conversations(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every turn of every conversation: its number, prompt length, TTFT and decision."""
    rng = random.Random(args.seed)
    turns: list[dict[str, Any]] = []

    async def talk(number: int) -> None:
        session = f"conversation-{args.seed}-{number}"
        history = [rng.randrange(3, 1000) for _ in range(args.first_len)]
        for turn in range(1, args.turns + 1):
            result = await one_turn(client, url, history, args.output_len, session)
            report = result["report"]
            turns.append(
                {
                    "conversation": number,
                    "turn": turn,
                    "prompt_tokens": len(history),
                    "ttft_ms": round(result["ttft_s"] * 1000, 2),
                    "decision": report.get("decision"),
                    "transport": report.get("kv_transport"),
                    "cached_tokens": report.get("cached_tokens"),
                }
            )
            history = (
                history + result["answer"] + [rng.randrange(3, 1000) for _ in range(args.turn_len)]
            )

    async with httpx.AsyncClient(timeout=300) as client:
        # A warm-up conversation of one turn (first-request costs are not measured).
        await one_turn(client, url, [rng.randrange(3, 1000) for _ in range(128)], 4, "warm-up")
        pending = list(range(args.conversations))
        while pending:
            batch, pending = pending[: args.concurrency], pending[args.concurrency :]
            await asyncio.gather(*(talk(n) for n in batch))
    return turns


def summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    first = [t["ttft_ms"] for t in turns if t["turn"] == 1]
    later = [t["ttft_ms"] for t in turns if t["turn"] > 1]
    decisions: dict[str, int] = {}
    for t in turns:
        if t["turn"] > 1:
            key = str(t["decision"])
            decisions[key] = decisions.get(key, 0) + 1
    return {
        "first_turn_ttft_ms": summarize(first),
        "later_turns_ttft_ms": summarize(later),
        "later_turn_decisions": decisions,
        "prompt_tokens": [
            min(t["prompt_tokens"] for t in turns),
            max(t["prompt_tokens"] for t in turns),
        ],
    }


def main() -> None:
    from load_tests.serving import compare

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--systems", nargs="*", choices=sorted(compare.SYSTEMS), default=list(SYSTEMS[:2])
    )
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--first-len", type=int, default=800)
    parser.add_argument("--turn-len", type=int, default=40)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/conversation.json")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []  # in the order run (a system may run more than once)
    for system in args.systems:
        with compare.SYSTEMS[system]() as url:
            turns = asyncio.run(conversations(url, args))
        runs.append({"system": system, "summary": summary(turns), "turns": turns})
        print(system, json.dumps(runs[-1]["summary"]), flush=True)
    out = {
        "conditions": {
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine(),
            **{k: v for k, v in vars(args).items() if k != "out"},
        },
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
