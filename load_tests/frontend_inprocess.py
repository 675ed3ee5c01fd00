"""The front end's own CPU per streamed chunk, in process: no Ray, engines or sockets.

    .venv/bin/python -m load_tests.frontend_inprocess [--chunks 60] [--requests 128]

The ingress's ASGI app (vLLM's serving classes, the engine client, the orchestrator)
over a fake pool that streams ``--chunks`` two-token chunks per request; ``--requests``
streamed completions, 16 at a time, through httpx's ASGI transport. Prints the process's
CPU time per chunk (the HTTP client's share included). End-to-end figures on a shared
machine move more between runs than the front end's share of them; this isolates it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.api.engine_client import PoolEngineClient
from app.api.http_api import OpenAIServer
from app.api.openai_serving import build_serving
from app.config import AppConfig, IngressConfig, Mode
from app.engine.setup import ingress_vllm_config
from app.flow.orchestrator import Orchestrator
from app.kv.fallback import Transport
from app.model.source import resolve_model
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult, Started, TokenChunk


class _Pool(PoolClient):
    def __init__(self, chunks: int) -> None:
        self.chunks = chunks

    async def prefill(
        self, request: GenerateRequest, transport: Transport
    ) -> AsyncIterator[Started | PrefillResult]:
        yield Started("prefill")
        yield PrefillResult({"remote_block_ids": [[1]]}, len(request.prompt_token_ids))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Started | TokenChunk]:
        yield Started("decode")
        for i in range(self.chunks):
            await asyncio.sleep(0)
            last = i == self.chunks - 1
            yield TokenChunk("ab", [11, 12], finish_reason="length" if last else None)


async def measure(chunks: int, requests: int) -> float:
    config = AppConfig()
    path = resolve_model(config.model.source)
    pool = _Pool(chunks)
    orchestrator = Orchestrator(Mode.DISAGGREGATED, pool, pool, local_prefill_below_tokens=0)
    client = PoolEngineClient(ingress_vllm_config(config, path), orchestrator, 300)
    app = OpenAIServer(build_serving(client, config, path), IngressConfig(), None).asgi_app()
    body: dict[str, Any] = {
        "model": "tiny-llama",
        "prompt": list(range(10, 138)),
        "max_tokens": 2 * chunks,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def one(http: httpx.AsyncClient) -> None:
        async with http.stream("POST", "http://ingress/v1/completions", json=body) as response:
            async for _ in response.aiter_bytes():
                pass

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http:
        await one(http)
        started = time.process_time()
        for _ in range(requests // 16):
            await asyncio.gather(*(one(http) for _ in range(16)))
        return (time.process_time() - started) / (16 * (requests // 16) * chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=60)
    parser.add_argument("--requests", type=int, default=128)
    args = parser.parse_args()
    per_chunk = asyncio.run(measure(args.chunks, args.requests))
    print(f"CPU per chunk: {per_chunk * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
