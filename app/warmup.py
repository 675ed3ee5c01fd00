"""Warm-up before ready: an engine replica does its one-time work before Serve routes to it.

Serve counts a replica ready when its constructor returns, so the constructor warms up:

1. **The engine.** Prefills of several prompt lengths and a batch of concurrent decodes,
   the shapes the replica will see: the first forward passes of each shape (kernel
   set-up, allocator growth) happen here, not on users' requests.
2. **The pair** (decode replicas of a disaggregated app). One request per configured
   transport goes through a prefill replica and is pulled by this replica: for NIXL that
   is the handshake with that prefill engine and a first read; for the object store, a
   first put and get.

Replicas that autoscaling adds or Serve restarts run the same constructor, so they warm
up the same way. A warm-up request that fails is logged and counted, not fatal: the
replica can still serve (the transport chain ends in recompute).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from app.kv_transport.fallback import Transport
from app.orchestrator import PoolClient
from app.records import GenerateRequest, PrefillResult, Role, TokenChunk

logger = logging.getLogger("splitserve.warmup")

PROMPT_LENGTHS = (16, 128, 512, 1024)
DECODE_BATCH = 8
DECODE_TOKENS = 8
PAIR_PROMPT_TOKENS = 300
# A pair warm-up waits this long for a prefill replica (they start at the same time).
PAIR_TIMEOUT_S = 600.0


@dataclass
class WarmupReport:
    """Seconds each stage took; the transports whose pair warm-up worked, or why not."""

    engine_s: float = 0.0
    pair_s: float = 0.0
    transports: dict[str, str] = field(default_factory=dict)  # transport -> "ok" or reason

    @property
    def total_s(self) -> float:
        return self.engine_s + self.pair_s


def _prompt(server: Any, length: int, salt: int) -> list[int]:
    """A prompt no user shares (so warm-up leaves nothing useful in the prefix cache)."""
    vocab = int(server.engine.model_config.get_vocab_size())
    return [10 + (salt * 7919 + i * 104729) % (vocab - 10) for i in range(length)]


def _params(max_tokens: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)


async def _drain(chunks: Any) -> list[TokenChunk]:
    return [c async for c in chunks if isinstance(c, TokenChunk)]


async def warm_engine(server: Any, role: Role, max_model_len: int) -> float:
    """Run the shapes ``role`` sees through ``server`` (an EngineServer); seconds taken."""
    started = time.perf_counter()
    lengths = [n for n in PROMPT_LENGTHS if n + DECODE_TOKENS < max_model_len] or [8]
    tokens = 1 if role is Role.PREFILL else DECODE_TOKENS
    # One prompt length at a time (prefill shapes), then a batch at once (decode shapes).
    for n, length in enumerate(lengths):
        request = GenerateRequest(f"warmup-{role}-{n}", _prompt(server, length, n), _params(tokens))
        await _drain(server.generate(request))
    batch = [
        GenerateRequest(
            f"warmup-{role}-batch-{i}", _prompt(server, lengths[0], 100 + i), _params(tokens)
        )
        for i in range(DECODE_BATCH)
    ]
    await asyncio.gather(*(_drain(server.generate(r)) for r in batch))
    return time.perf_counter() - started


async def warm_pair(
    server: Any, prefill: PoolClient, transports: tuple[Transport, ...], report: WarmupReport
) -> None:
    """For each transport, prefill on ``prefill`` and pull the KV into ``server``."""
    started = time.perf_counter()
    for n, transport in enumerate(transports):
        request = GenerateRequest(
            f"warmup-pair-{transport}-{server.engine_id}",
            _prompt(server, PAIR_PROMPT_TOKENS, 500 + n),
            _params(2),
        )
        try:
            async with asyncio.timeout(PAIR_TIMEOUT_S):
                report.transports[transport.value] = await _pull(
                    server, prefill, request, transport
                )
        except TimeoutError:
            report.transports[transport.value] = f"no answer within {PAIR_TIMEOUT_S:g} s"
        except Exception as exc:  # warm-up must not keep a replica from serving
            report.transports[transport.value] = f"{type(exc).__name__}: {exc}"
        if report.transports[transport.value] != "ok":
            logger.error(
                "warm-up over %s failed (%s): requests will fall back to the next transport",
                transport.value,
                report.transports[transport.value],
            )
    report.pair_s = time.perf_counter() - started


async def _pull(
    server: Any, prefill: PoolClient, request: GenerateRequest, transport: Transport
) -> str:
    """Prefill ``request`` on ``prefill`` and pull its KV into ``server``: "ok" or why not."""
    result = None
    async for item in prefill.prefill(request, transport):
        if isinstance(item, PrefillResult):
            result = item
    if result is None:
        return "the prefill pool returned no result"
    pulled = replace(
        request,
        kv_transfer_params=result.kv_transfer_params,
        kv_object=result.kv_object,
        kv_num_tokens=result.num_prompt_tokens,
    )
    chunks = await _drain(server.generate(pulled))
    failed = chunks[0].transfer_failed if chunks else None
    return "ok" if failed is None else str(failed)
