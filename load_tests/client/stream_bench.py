"""Fixed-concurrency streaming benchmark against any OpenAI-compatible completions endpoint.

    python -m load_tests.client.stream_bench --url http://127.0.0.1:8100 --concurrency 1 \
        --requests 50 --input-len 128 --output-len 128

Each request streams a completion of random token ids (fixed input length, ``ignore_eos``
so the output length is fixed too) and records TTFT, TPOT (per token, from the usage
count) and end-to-end time. Reads every stream until the server closes it (an early
close looks like a client disconnect). Prints JSON with p50/p95/p99 and the
run conditions. Only point it at loopback or the project's own test hosts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import time
from typing import Any

import httpx

from load_tests.client.sse import DONE, sse_data
from load_tests.client.stats import StreamTiming, summarize


class RequestFailed(RuntimeError):
    """A request answered with an HTTP error (``status``) or an error event (None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


async def one_request(
    client: httpx.AsyncClient, url: str, model: str | None, prompt: list[int], output_len: int
) -> StreamTiming:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": output_len,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    started = time.perf_counter()
    ttft = None
    tokens = 0
    server = None
    last = 0.0
    gaps: list[float] = []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RequestFailed(
                f"HTTP {response.status_code}: {await response.aread()!r}", response.status_code
            )
        async for data in sse_data(response):
            if data == DONE:
                continue
            try:
                event = json.loads(data)
            except json.JSONDecodeError as exc:
                raise RuntimeError(f"malformed event {data[:200]!r}: {exc}") from exc
            if "error" in event:
                raise RequestFailed(event["error"]["message"])
            if event.get("usage"):
                tokens = int(event["usage"]["completion_tokens"])
                server = event.get("splitserve")
            elif any(c.get("text") for c in event["choices"]):
                now = time.perf_counter() - started
                if ttft is None:
                    ttft = now
                else:
                    gaps.append(now - last)
                last = now
    end = time.perf_counter() - started
    return StreamTiming(
        ttft=ttft if ttft is not None else end,
        end=end,
        output_tokens=tokens,
        server=server,
        chunk_gaps=tuple(gaps),
        prompt_tokens=len(prompt),
    )


async def closed_loop(
    client: httpx.AsyncClient,
    url: str,
    model: str | None,
    requests: list[tuple[list[int], int]],
    concurrency: int,
) -> tuple[list[StreamTiming], list[str]]:
    """Serve ``requests`` (prompt, max_tokens) with ``concurrency`` clients in a closed loop."""
    queue: asyncio.Queue[tuple[list[int], int]] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    timings: list[StreamTiming] = []
    failures: list[str] = []

    async def worker() -> None:
        while not queue.empty():
            prompt, max_tokens = queue.get_nowait()
            try:
                timings.append(await one_request(client, url, model, prompt, max_tokens))
            except (RuntimeError, httpx.HTTPError) as exc:
                failures.append(str(exc))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return timings, failures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    prompts = [
        [rng.randrange(3, 1000) for _ in range(args.input_len)] for _ in range(args.requests)
    ]
    async with httpx.AsyncClient(timeout=args.timeout) as client:
        # One warm-up request so first-request costs (handshakes) are not measured.
        await one_request(client, args.url, args.model, prompts[0], 4)
        started = time.perf_counter()
        timings, failures = await closed_loop(
            client, args.url, args.model, [(p, args.output_len) for p in prompts], args.concurrency
        )
        wall = time.perf_counter() - started

    output_tokens = sum(t.output_tokens for t in timings)
    return {
        "conditions": {
            "url": args.url,
            "concurrency": args.concurrency,
            "requests": args.requests,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "seed": args.seed,
            "host": platform.node(),
            "python": platform.python_version(),
        },
        "ok": len(timings),
        "failed": len(failures),
        "failures": failures[:5],
        "wall_s": wall,
        "output_tok_per_s": output_tokens / wall if wall > 0 else 0.0,
        "ttft_ms": summarize([t.ttft for t in timings], 1000),
        "tpot_ms": summarize([t.tpot for t in timings], 1000),
        "e2e_ms": summarize([t.end for t in timings], 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8100")
    parser.add_argument("--model", default=None)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
