"""A real engine's KV events, read as a replica reads them (app.engine.kv_events): what
its prefix cache holds, named as the router names a prompt's blocks, through stores,
evictions, a reset, and events the reader missed (recovered from the replay socket)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable

import pytest

from app.engine.kv_events import EventSockets, KvEventReader
from app.model.source import resolve_model
from app.routing.engine_blocks import EngineBlocks
from app.routing.prefix_affinity import block_hashes
from tests.integration.helpers import random_prompt

BLOCKS = 48  # the engine's whole cache, in blocks (128 tokens on the CPU backend)


async def _until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the engine's KV events never said so"
        await asyncio.sleep(0.05)


def _held(blocks: EngineBlocks) -> set[int]:
    return set(blocks.changes(None, 0).added)


async def _scenario() -> str:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    sockets = EventSockets.make()
    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=resolve_model("builtin:tiny-llama"),
            max_model_len=2048,
            enforce_eager=True,
            enable_prefix_caching=True,
            num_gpu_blocks_override=BLOCKS,
            kv_events_config=sockets.engine_config(),
        )
    )
    block = engine.vllm_config.cache_config.block_size
    params = SamplingParams(max_tokens=1, temperature=0)

    async def run(prompt: list[int]) -> None:
        async for _ in engine.generate({"prompt_token_ids": prompt}, params, uuid.uuid4().hex):
            pass

    late_reader: KvEventReader | None = None
    reader = KvEventReader(sockets, EngineBlocks(block))
    try:
        reader.start()
        first = random_prompt(9100, 4 * block + 10)
        await run(first)
        # Four full blocks, named as the router names the prompt's first four.
        want = set(block_hashes(first, block))
        await _until(lambda: want <= _held(reader.blocks))
        assert len(want) == 4 and reader.blocks.unnamed == 0
        # A reader waiting for a change (the ingress's long poll) wakes as the cache changes.
        waited = time.monotonic()
        waiting = asyncio.create_task(reader.changed(30.0))
        await asyncio.sleep(0.1)
        await run(random_prompt(9199, 2 * block))
        await waiting
        assert time.monotonic() - waited < 10

        # A reader that starts now missed those events: it asks the replay socket.
        late_reader = KvEventReader(sockets, EngineBlocks(block))
        late_reader.start()
        await run(random_prompt(9101, 2 * block))  # the next batch shows the gap
        await _until(lambda: want <= _held(late_reader.blocks))
        assert late_reader.replayed >= 1 and late_reader.lost == 0

        # Prompts that need more than the whole cache evict the first one's blocks.
        for seed in range(9102, 9106):
            await run(random_prompt(seed, 2000))
        await _until(lambda: not want & _held(reader.blocks))
        assert len(_held(reader.blocks)) <= BLOCKS

        # A reset clears everything, in a new epoch.
        epoch = reader.blocks.epoch
        assert await engine.reset_prefix_cache()
        await run(random_prompt(9107, 8))  # reset events go out with the next step
        await _until(lambda: reader.blocks.epoch != epoch)
        assert reader.blocks.changes(epoch, 0).full
    finally:
        reader.close()
        if late_reader is not None:
            late_reader.close()
        engine.shutdown()
    return sockets.directory


@pytest.mark.timeout(300)
def test_a_replica_reads_what_its_engines_prefix_cache_holds() -> None:
    directory = asyncio.run(_scenario())
    assert not os.path.exists(directory)  # the private socket directory went with it
