"""Chaos soak: steady load while replicas and engines die and the app rolls, every answer
checked against a colocated float32 oracle.

    scripts/loopback-netns .venv/bin/python -m load_tests.reliability.chaos_soak --minutes 30 \
        --load 0.7 --fault-every-s 60 [--out docs/results/chaos_soak.json]

The extension of :mod:`load_tests.reliability.fault_soak` (which kills decode replicas only and
checks answers for length) that docs/reliability.md reports. Each answer is checked
twice: its token ids against the oracle's, and its text against the tokenizer's decode
of those ids (holding none of its prompt's text):

1. **Oracle.** A colocated app (serve_configs/colocated.yaml, float32) answers each prompt
   of a fixed pool once, greedily; its token ids are the truth. Then it stops.
2. **Soak.** The disaggregated app (``--config``, float32, ``--decode-replicas``) gets
   Poisson arrivals at ``--load`` times its measured capacity, half streamed and half
   not, each a prompt from the pool (short ones are prefilled on decode, long ones
   remotely). float32, so that a stream that moves to another engine, whose tokens so far
   are prefilled in one pass there, must still equal the oracle token for token.
3. **Faults**, every ``--fault-every-s``, in turn: ``ray.kill`` the prefill replica,
   ``ray.kill`` the busiest decode replica, SIGKILL a decode replica's engine process,
   roll a redeploy (a changed config: Serve replaces every replica).

A client shed with 503 waits its ``Retry-After`` and sends again, as the OpenAI SDK
does; that is counted, not failed. Reported: requests, wrong answers, failed requests,
fallbacks by kind, migrations by cause, KV blocks held and ``/dev/shm`` files left at the
end, the app's RSS drift.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from app.config import AppConfig
from app.model.source import resolve_model
from load_tests.client import aio_stream
from load_tests.client.text_oracle import echoes, text_matches
from load_tests.faults.chaos import Faults
from load_tests.reliability.fault_soak import blocks_free, memory_sample, rss_change, shm_files
from load_tests.reliability.overload import capacity
from load_tests.systems.local_app import LocalApp, config_args, merge
from load_tests.systems.run_conditions import machine

FLOAT32 = {"model": {"dtype": "float32"}}


def prompt_pool(seed: int, count: int, long_tokens: int) -> list[list[int]]:
    """``count`` prompts, alternately short (prefilled on decode) and long (remotely: at
    least the router's ``local_prefill_below_tokens``, 512 by default)."""
    rng = random.Random(seed)
    return [
        [rng.randrange(3, 1000) for _ in range(40 if i % 2 else long_tokens)] for i in range(count)
    ]


def body(prompt: list[int], max_tokens: int, stream: bool) -> dict[str, Any]:
    request: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    if stream:
        request.update(stream=True, stream_options={"include_usage": True})
    return request


@dataclass
class Answer:
    """How one request ended: its tokens, or why it has none."""

    status: int = 0
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    error: str = ""
    report: dict[str, Any] = field(default_factory=dict)  # the `splitserve` field
    shed: int = 0  # 503s retried
    retry_after: str | None = None


async def ask(client: Any, url: str, request: dict[str, Any]) -> Answer:
    """Send ``request`` until it is not shed; read the whole answer. ``client`` is an
    aiohttp session (:func:`load_tests.client.aio_stream.session`): at a few hundred requests in
    flight, httpx's own CPU cost on two shared cores starved the soak's retries."""
    import aiohttp

    answer = Answer()
    while True:
        try:
            async with client.post(f"{url}/v1/completions", json=request) as response:
                answer.status = response.status
                if response.status != 200:
                    answer.error = (await response.text())[:300]
                    answer.retry_after = response.headers.get("Retry-After")
                elif request.get("stream"):
                    await _streamed(response, answer)
                else:
                    data = await response.json()
                    answer.tokens = list(data["choices"][0].get("token_ids") or [])
                    answer.text = data["choices"][0].get("text") or ""
                    answer.report = data.get("splitserve") or {}
        except (TimeoutError, aiohttp.ClientError) as exc:
            answer.status, answer.error = 0, f"{type(exc).__name__}: {exc}"[:300]
        if answer.status == 503 and answer.retry_after:
            answer.shed += 1
            await asyncio.sleep(float(answer.retry_after))
            answer.status, answer.error, answer.retry_after = 0, "", None
            answer.tokens, answer.text = [], ""
            continue
        return answer


async def _streamed(response: Any, answer: Answer) -> None:
    async for event in aio_stream.events(response):
        if "error" in event:
            answer.error = json.dumps(event["error"])[:300]
        for choice in event.get("choices") or ():
            answer.tokens.extend(choice.get("token_ids") or ())
            answer.text += choice.get("text") or ""
        if event.get("splitserve"):
            answer.report = event["splitserve"]


def oracle(prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Each prompt's greedy answer from a colocated float32 app, token ids."""

    async def run(url: str) -> list[list[int]]:
        async with aio_stream.session(600) as client:
            limit = asyncio.Semaphore(4)

            async def one(prompt: list[int]) -> list[int]:
                async with limit:
                    answer = await ask(client, url, body(prompt, max_tokens, stream=False))
                assert answer.status == 200 and len(answer.tokens) == max_tokens, answer
                return answer.tokens

            return list(await asyncio.gather(*(one(p) for p in prompts)))

    with LocalApp("serve_configs/colocated.yaml", num_cpus=2, overrides=FLOAT32) as app:
        return asyncio.run(run(app.url))


async def soak(
    url: str,
    prompts: list[list[int]],
    truth: list[list[int]],
    rate: float,
    seconds: float,
    max_tokens: int,
    seed: int,
    decode: Callable[[list[int]], str],
) -> list[dict[str, Any]]:
    """Poisson arrivals; each answer compared with the oracle's, token for token, and its
    text with ``decode`` of its token ids (the tokenizer's), holding none of its prompt."""
    rng = random.Random(seed)
    ends: list[dict[str, Any]] = []
    async with aio_stream.session(900) as client:

        async def send(at_s: float, index: int, stream: bool) -> None:
            answer = await ask(client, url, body(prompts[index], max_tokens, stream))
            end: dict[str, Any] = {
                "at_s": round(at_s, 1),
                "prompt": index,
                "stream": stream,
                "status": answer.status,
                "shed": answer.shed,
                "fallbacks": [f["kind"] for f in answer.report.get("fallbacks", [])],
                "migrations": [m["cause"] for m in answer.report.get("migrations", [])],
                "transport": answer.report.get("kv_transport"),
                "decision": answer.report.get("decision"),
            }
            if answer.status != 200 or answer.error:
                end["outcome"] = "failed"
                end["error"] = answer.error or f"HTTP {answer.status}"
            elif answer.tokens != truth[index]:
                end["outcome"] = "wrong"
                pairs = enumerate(zip(answer.tokens, truth[index], strict=False))
                end["first_difference"] = next(
                    (i for i, (a, b) in pairs if a != b),
                    min(len(answer.tokens), len(truth[index])),
                )
                end["tokens"] = len(answer.tokens)
            elif not text_matches(answer.text, decode(answer.tokens)) or echoes(
                answer.text, decode(prompts[index])
            ):
                end["outcome"] = "wrong"
                end["wrong_text"] = answer.text[:200]
            else:
                end["outcome"] = "right"
            ends.append(end)

        tasks = []
        started = time.perf_counter()
        due = 0.0
        while due < seconds:
            wait = started + due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            index = rng.randrange(len(prompts))
            tasks.append(asyncio.create_task(send(due, index, rng.random() < 0.5)))
            due += rng.expovariate(rate)
        await asyncio.gather(*tasks)
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--decode-replicas", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=0.7, help="share of measured capacity")
    parser.add_argument("--fault-every-s", type=float, default=60.0)
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--long-prompt-tokens", type=int, default=700)
    parser.add_argument("--settle-s", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="load_tests/results/chaos_soak.json")
    args = parser.parse_args()

    prompts = prompt_pool(args.seed, args.prompts, args.long_prompt_tokens)
    truth = oracle(prompts, args.max_tokens)
    overrides = merge(FLOAT32, {"decode": {"num_replicas": args.decode_replicas}})
    config = AppConfig.model_validate(merge(config_args(args.config), overrides))
    shm_before = shm_files()
    samples: list[dict[str, Any]] = []
    with LocalApp(args.config, num_cpus=1 + args.decode_replicas, overrides=overrides) as app:
        # Through Serve's proxy: a redeploy replaces the ingress replica, whose own port
        # (direct ingress) then changes, as a load balancer in front would follow.
        url = app.proxy_url
        rate = args.load * asyncio.run(capacity(url, random.Random(args.seed)))
        faults = Faults(app, args, overrides)
        seconds = args.minutes * 60
        stop = threading.Event()
        started = time.monotonic()

        def sample() -> None:
            samples.append(memory_sample(started))

        def watch() -> None:
            number = 0
            while not stop.wait(args.fault_every_s):
                sample()
                elapsed = time.monotonic() - started
                if elapsed < seconds - args.fault_every_s / 2:
                    faults.inject(number, elapsed)
                    number += 1

        sample()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.model.source))

        def decode(ids: list[int]) -> str:
            return str(tokenizer.decode(ids, skip_special_tokens=True))

        ends = asyncio.run(
            soak(url, prompts, truth, rate, seconds, args.max_tokens, args.seed, decode)
        )
        stop.set()
        watcher.join()
        if faults.rolling is not None:
            faults.rolling.join(timeout=600)
        sample()
        free = {
            "Prefill": blocks_free(app, "Prefill", 1, args.settle_s),
            "Decode": blocks_free(app, "Decode", args.decode_replicas, args.settle_s),
        }
    time.sleep(5)  # engine processes exit after the cluster
    shm_left = sorted(shm_files() - shm_before)

    outcomes = Counter(e["outcome"] for e in ends)
    result = {
        "conditions": {
            **vars(args),
            "machine": machine(),
            "deadline_s": config.ingress.request_timeout_s,
        },
        "capacity_rps": round(rate / args.load, 3),
        "rate_rps": round(rate, 3),
        "requests": len(ends),
        "streamed": sum(1 for e in ends if e["stream"]),
        "right": outcomes["right"],
        "wrong": outcomes["wrong"],
        "failed": outcomes["failed"],
        "failed_by_error": dict(
            Counter(e["error"][:80] for e in ends if e["outcome"] == "failed").most_common(10)
        ),
        "shed_and_retried": sum(e["shed"] for e in ends),
        "fallbacks_by_kind": dict(Counter(k for e in ends for k in e["fallbacks"])),
        "migrations_by_cause": dict(Counter(c for e in ends for c in e["migrations"])),
        "transports": dict(Counter(str(e["transport"]) for e in ends)),
        "decisions": dict(Counter(str(e["decision"]) for e in ends)),
        "faults": faults.log,
        "redeploys_failed": sum(1 for f in faults.log if "roll_error" in f),
        "redeploys_failed_running_again": sum(1 for f in faults.log if "running_again_s" in f),
        "kv_blocks_free_at_end": free,
        "shm_files_left": shm_left,
        "rss": rss_change(samples, skip_min=5.0),
        "memory_samples": samples,
        "wrong_answers": [e for e in ends if e["outcome"] == "wrong"][:20],
        "failures": [e for e in ends if e["outcome"] == "failed"][:20],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "memory_samples"}, indent=2))


if __name__ == "__main__":
    main()
