"""Warm-up before ready: an engine replica does its one-time work before Serve routes to it.

Serve counts a replica ready when its constructor returns, so the constructor warms up:

1. **The engine.** Prefills of several prompt lengths and a batch of concurrent decodes,
   the shapes the replica will see: the first forward passes of each shape (kernel
   set-up, allocator growth) happen here, not on users' requests.
2. **The pairs** (a disaggregated app). A decode replica, for each prefill replica, has
   one request per configured transport prefilled on that replica and pulls its KV: for
   NIXL that is the handshake with that prefill engine and a first read; for the object
   store, a first put and get. A prefill replica that joins a running app (autoscaled,
   or restarted after a crash) does the same the other way round: it prefills, and each
   running decode replica pulls from it. (At an app's start the decode replicas pair
   with the prefill replicas already running; one that starts later than a decode
   replica's warm-up and sees no decode replica running yet is paired by its first
   transfer from each.)

Replicas that autoscaling adds or Serve restarts run the same constructor, so they warm
up the same way. A warm-up request that fails is logged and counted, not fatal: the
replica can still serve (the transport chain ends in recompute).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from app.kv.fallback import Transport
from app.pool.client import PoolClient
from app.pool.records import GenerateRequest, PrefillResult, Role, TokenChunk

logger = logging.getLogger("splitserve.warmup")

PROMPT_LENGTHS = (16, 128, 512, 1024)
DECODE_BATCH = 8
DECODE_TOKENS = 8
PAIR_PROMPT_TOKENS = 300
# After its first transfer (the handshake), a pair moves one prompt this long to measure
# the link's bandwidth (app.kv.link_meter); shorter if the model's length is.
MEASURE_PROMPT_TOKENS = 2048
# A pair warm-up waits this long for a prefill replica (they start at the same time).
PAIR_TIMEOUT_S = 600.0
# A prefill replica joining a running app pairs with its decode replicas for this long at
# most. It is a head start, not a need (a decode replica meets it on its first request
# anyway), and it must not wait on decode replicas that are themselves starting: those
# wait for a prefill replica to pair with, and a redeploy that restarts both pools at
# once deadlocked for PAIR_TIMEOUT_S (found by load_tests/reliability/chaos_soak.py).
JOIN_PAIR_TIMEOUT_S = 30.0


@dataclass
class WarmupReport:
    """Seconds each stage took; the transports whose pair warm-up worked, or why not."""

    engine_s: float = 0.0
    pair_s: float = 0.0
    transports: dict[str, str] = field(default_factory=dict)  # transport -> "ok" or reason
    peers: int = 0  # replicas of the other pool paired with

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
    server: Any,
    prefill: PoolClient,
    transports: tuple[Transport, ...],
    report: WarmupReport,
    prefill_replicas: list[str],
) -> None:
    """Decode side: for each prefill replica and transport, prefill on that replica
    (through ``prefill``) and pull the KV into ``server``."""
    request = _pair_request(server, "decode")

    async def pull(peer: str, transport: Transport) -> str:
        pinned = replace(request(transport), replica=peer)
        outcome = await _pair(prefill.prefill, server.generate, pinned, transport)
        if outcome == "ok":  # the link is up: measure it (a failure here is not the pair's)
            measure = replace(request(transport, _measure_length(server)), replica=peer)
            await _pair(prefill.prefill, server.generate, measure, transport)
        return outcome

    await warm_peers(pull, prefill_replicas or [""], transports, report)


async def warm_pair_from_prefill(
    server: Any,
    decode: PoolClient,
    transports: tuple[Transport, ...],
    report: WarmupReport,
    decode_replicas: list[str],
) -> None:
    """Prefill side (a replica added to a running app): for each decode replica and
    transport, prefill on ``server`` and have that replica (through ``decode``) pull it."""
    request = _pair_request(server, "prefill")

    async def push(peer: str, transport: Transport) -> str:
        return await _pair(server.prefill, decode.generate, request(transport), transport, peer)

    await warm_peers(push, decode_replicas, transports, report, JOIN_PAIR_TIMEOUT_S)


def _pair_request(server: Any, side: str) -> Callable[..., GenerateRequest]:
    def request(transport: Transport, length: int = PAIR_PROMPT_TOKENS) -> GenerateRequest:
        return GenerateRequest(
            f"warmup-pair-{side}-{transport}-{server.engine_id}-{uuid.uuid4().hex[:6]}",
            _prompt(server, length, 500 + list(Transport).index(transport) + length),
            _params(2),
        )

    return request


def _measure_length(server: Any) -> int:
    longest = int(server.engine.model_config.max_model_len) - 8
    return max(PAIR_PROMPT_TOKENS, min(MEASURE_PROMPT_TOKENS, longest))


async def warm_peers(
    pair: Callable[[str, Transport], Awaitable[str]],
    peers: list[str],
    transports: tuple[Transport, ...],
    report: WarmupReport,
    timeout_s: float | None = None,
) -> None:
    """Run ``pair`` for every peer and transport, all at once (one wedged peer costs at
    most ``timeout_s``, ``PAIR_TIMEOUT_S`` by default, in all, not per pair); per
    transport, "ok" or the first failure."""
    started = time.perf_counter()
    limit = PAIR_TIMEOUT_S if timeout_s is None else timeout_s

    async def bounded(peer: str, transport: Transport) -> str:
        try:
            async with asyncio.timeout(limit):
                return await pair(peer, transport)
        except TimeoutError:
            return f"no answer within {limit:g} s"
        except Exception as exc:  # warm-up must not keep a replica from serving
            return f"{type(exc).__name__}: {exc}"

    jobs = [(transport, peer) for transport in transports for peer in peers]
    results = await asyncio.gather(*(bounded(peer, transport) for transport, peer in jobs))
    for transport in transports:
        outcome = "ok"
        for (done, peer), result in zip(jobs, results, strict=True):
            if done is transport and result != "ok" and outcome == "ok":
                outcome = f"replica {peer}: {result}" if peer else result
        report.transports[transport.value] = outcome
        if outcome != "ok":
            logger.error(
                "warm-up over %s failed (%s): requests will fall back to the next transport",
                transport.value,
                outcome,
            )
    report.peers = len(peers)
    report.pair_s = time.perf_counter() - started


async def _pair(
    prefill: Callable[[GenerateRequest, Transport], AsyncIterator[Any]],
    decode: Callable[[GenerateRequest], AsyncIterator[Any]],
    request: GenerateRequest,
    transport: Transport,
    decode_replica: str = "",
) -> str:
    """Prefill ``request`` with ``prefill`` and pull its KV with ``decode``: "ok" or why not."""
    result = None
    async for item in prefill(request, transport):
        if isinstance(item, PrefillResult):
            result = item
    if result is None:
        return "the prefill returned no result"
    pulled = replace(
        request,
        kv_transfer_params=result.kv_transfer_params,
        kv_object=result.kv_object,
        kv_num_tokens=result.num_prompt_tokens,
        kv_source=result.replica,
        replica=decode_replica,
    )
    chunks = await _drain(decode(pulled))
    failed = chunks[0].transfer_failed if chunks else None
    return "ok" if failed is None else str(failed)
