"""A burst at once: does admission keep its promise (admitted requests get a first token
within ``ingress.admission.ttft_budget_s``) whatever the path?

    scripts/loopback-netns .venv/bin/python -m load_tests.reliability.burst [--config ...] \
        [--burst 300] [--every-prompt-remote] [--out docs/results/burst.json]

Starts the app (with ``--every-prompt-remote``: ``local_prefill_below_tokens: 0``, so
each request is a remote prefill and a KV transfer), warms it with a short closed loop,
then sends ``--burst`` requests at the same instant (256 prompt tokens, 64 output, each
prompt its own), twice: the first burst after the warm loop, the second after
``--pause-s`` idle. For each: how many were admitted and refused, and the admitted
requests' TTFT p50/p99 against the budget (TTFT counted from the burst's instant).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from app.config import AppConfig
from load_tests.client import aio_stream
from load_tests.client.stats import summarize
from load_tests.client.workloads import fixed
from load_tests.reliability.overload import OUTPUT, PROMPT, _outcome, capacity
from load_tests.systems.local_app import LocalApp, config_args, merge
from load_tests.systems.run_conditions import machine


async def burst(url: str, count: int, rng: random.Random) -> dict[str, Any]:
    """``count`` streamed requests sent at one instant; outcomes and admitted TTFTs."""
    statuses: dict[str, int] = {}
    ttfts: list[float] = []
    async with aio_stream.session() as client:
        at = time.perf_counter()

        async def send(prompt: list[int], max_tokens: int) -> None:
            body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens}
            got = await aio_stream.stream_completion(
                client, url, {**body, "temperature": 0, "ignore_eos": True}, since=at
            )
            key = _outcome(got)
            statuses[key] = statuses.get(key, 0) + 1
            if key == "200" and got.ttft_s is not None:
                ttfts.append(got.ttft_s)

        await asyncio.gather(*(send(p, n) for p, n in fixed(rng, count, PROMPT, OUTPUT)))
    return {
        "sent": count,
        "admitted": len(ttfts),
        "statuses": statuses,
        "admitted_ttft_ms": summarize(ttfts, 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--every-prompt-remote", action="store_true")
    parser.add_argument("--pause-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    overrides: dict[str, Any] = {}
    if args.every_prompt_remote:
        overrides = {"router": {"local_prefill_below_tokens": 0}}
    config = AppConfig.model_validate(merge(config_args(args.config), overrides))
    rng = random.Random(args.seed)
    with LocalApp(args.config, overrides=overrides) as app:
        capacity_rps = asyncio.run(capacity(app.url, rng))
        first = asyncio.run(burst(app.url, args.burst, rng))
        time.sleep(args.pause_s)
        second = asyncio.run(burst(app.url, args.burst, rng))
    result = {
        "conditions": {**vars(args), "out": str(args.out), "machine": machine()},
        "ttft_budget_ms": config.ingress.admission.ttft_budget_s * 1000,
        "capacity_rps": round(capacity_rps, 2),
        "bursts": [first, second],
    }
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
