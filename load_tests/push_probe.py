"""Does vLLM's NIXL push connector (decode-first hand-off) work here, and what does it save?

    .venv/bin/python -m load_tests.push_probe [--mode push|pull] [--requests 20] [--tokens 128]

Starts one prefill and one decode engine of the default config (tiny model, prefill on
core 0, decode on core 1) in this process, with vLLM's ``NixlPushConnector`` (``push``)
or ``NixlConnector`` (``pull``), ``kv_buffer_device: cpu``, and no Ray or Serve.

- push: the decode request, naming the prefill engine, and the prefill request, under the
  same id, are sent at once. Decode allocates the prompt's blocks and registers them with
  prefill (a NIXL notification); prefill WRITEs its KV into them as it finishes. One
  sequential hop comes off: decode no longer waits for prefill's answer to start.
- pull (splitserve's path today): prefill first; its answer's KV parameters go to decode,
  which READs the blocks.

Each greedy answer is compared with the same prompt on the decode engine alone
(recompute), and time to first token is reported from the first send. Writes JSON to
``--out``.

``--fault prefill-lost`` (push only) asks what a fault does to the hand-off: each decode
request names the prefill engine, but the prefill request is never sent, as when the
prefill replica dies between the two sends. It reports whether decode's request ends on
its own within ``--timeout-s``, and the decode engine's KV usage and running/waiting
counts before it, while it waits, and after the client gives up (the abort).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from app.config import AppConfig, serve_file_args
from app.engine.setup import engine_arguments
from app.model.source import resolve_model
from app.net import free_listen_port
from app.pool.records import Role
from load_tests.client.stats import summarize
from load_tests.systems.run_conditions import machine

CONNECTORS = {"push": "NixlPushConnector", "pull": "NixlConnector"}


class KvUsage:
    """The decode engine's last scheduler figures (a vLLM stat logger)."""

    last: dict[str, float] = {}

    @staticmethod
    def factory(vllm_config: Any, engine_index: int = 0) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        class Logger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, *a: Any, **k: Any) -> None:
                if scheduler_stats is not None:
                    KvUsage.last = {
                        "kv_cache_usage": scheduler_stats.kv_cache_usage,
                        "running": scheduler_stats.num_running_reqs,
                        "waiting": scheduler_stats.num_waiting_reqs,
                    }

            def log_engine_initialized(self) -> None:
                pass

        return Logger(vllm_config, engine_index)


def start(
    role: Role,
    config: AppConfig,
    model: str,
    mode: str,
    core: str,
    loggers: list[Any] | None = None,
) -> tuple[Any, str, int]:
    """An AsyncLLM for ``role`` with vLLM's own NIXL connector in ``mode``."""
    from vllm.config import KVTransferConfig
    from vllm.v1.engine.async_llm import AsyncLLM

    engine_id = f"{role.value}-{uuid.uuid4().hex[:8]}"
    port = free_listen_port("127.0.0.1")
    os.environ.update(
        VLLM_NIXL_SIDE_CHANNEL_HOST="127.0.0.1",
        VLLM_NIXL_SIDE_CHANNEL_PORT=str(port),
        VLLM_CPU_OMP_THREADS_BIND=core,
        VLLM_CPU_KVCACHE_SPACE=str(config.model.kv_cache_gib),
    )
    args = engine_arguments(role, config, model, engine_id)
    args.worker_extension_cls = ""
    args.kv_transfer_config = KVTransferConfig(
        kv_connector=CONNECTORS[mode],
        kv_role="kv_producer" if role is Role.PREFILL else "kv_consumer",
        kv_buffer_device="cpu",
        engine_id=engine_id,
        kv_load_failure_policy="fail",
    )
    vllm_config = args.create_engine_config()
    vllm_config.parallel_config.distributed_executor_backend = config.model.executor_backend
    return AsyncLLM.from_vllm_config(vllm_config, stat_loggers=loggers), engine_id, port


def push_params(engine_id: str, port: int, request_id: str) -> dict[str, Any]:
    """What a decode request names of its prefill engine in push mode."""
    return {
        "do_remote_prefill": True,
        "remote_engine_id": engine_id,
        "remote_host": "127.0.0.1",
        "remote_port": port,
        "tp_size": 1,
        # Without it vLLM 0.32's decode scheduler dies on a KeyError.
        "remote_request_id": request_id,
    }


async def final(engine: Any, prompt: list[int], params: Any, request_id: str) -> Any:
    last = None
    async for out in engine.generate({"prompt_token_ids": prompt}, params, request_id):
        last = out
    return last


async def one(
    mode: str,
    prefill: tuple[Any, str, int],
    decode: Any,
    prompt: list[int],
    max_tokens: int,
) -> dict[str, Any]:
    from vllm import SamplingParams

    engine, engine_id, port = prefill
    rid = uuid.uuid4().hex[:12]
    p_params = SamplingParams(
        max_tokens=1, extra_args={"kv_transfer_params": {"do_remote_decode": True}}
    )

    def d_params(kv: dict[str, Any]) -> Any:
        return SamplingParams(
            temperature=0,
            max_tokens=max_tokens,
            ignore_eos=True,
            extra_args={"kv_transfer_params": kv},
        )

    started = time.perf_counter()
    first: float | None = None
    tokens: list[int] = []

    async def decode_stream(params: Any) -> None:
        nonlocal first
        from vllm.sampling_params import RequestOutputKind

        params.output_kind = RequestOutputKind.DELTA
        async for out in decode.generate({"prompt_token_ids": prompt}, params, rid):
            if out.outputs[0].token_ids and first is None:
                first = time.perf_counter() - started
            tokens.extend(out.outputs[0].token_ids)
            if out.outputs[0].finish_reason == "error":
                raise RuntimeError("decode could not load the KV")

    if mode == "push":
        kv = push_params(engine_id, port, rid)
        await asyncio.gather(final(engine, prompt, p_params, rid), decode_stream(d_params(kv)))
    else:
        done = await final(engine, prompt, p_params, rid)
        await decode_stream(d_params(dict(done.kv_transfer_params)))
    return {"ttft_s": first, "tokens": tokens}


async def prefill_lost(
    prefill: tuple[Any, str, int], decode: Any, prompt: list[int], wait_s: float
) -> dict[str, Any]:
    """Decode registers its blocks with a prefill that never computes the request."""
    from vllm import SamplingParams

    _, engine_id, port = prefill
    rid = uuid.uuid4().hex[:12]
    kv = push_params(engine_id, port, rid)
    params = SamplingParams(
        temperature=0, max_tokens=4, ignore_eos=True, extra_args={"kv_transfer_params": kv}
    )
    before = dict(KvUsage.last)
    outcome = "no token and no error"
    try:
        async with asyncio.timeout(wait_s):
            async for out in decode.generate({"prompt_token_ids": prompt}, params, rid):
                if out.finished:
                    outcome = f"ended: {out.outputs[0].finish_reason}"
                    break
    except TimeoutError:
        outcome = f"no token and no error after {wait_s:g} s; the client aborts"
    waiting = dict(KvUsage.last)
    await asyncio.sleep(3.0)  # a few engine steps after the abort
    return {
        "outcome": outcome,
        "before": before,
        "waiting": waiting,
        "after_abort": dict(KvUsage.last),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import SamplingParams

    config = AppConfig.model_validate(serve_file_args(args.config))
    model = resolve_model(config.model.source)
    prefill = start(Role.PREFILL, config, model, args.mode, "0")
    decode, _, _ = start(Role.DECODE, config, model, args.mode, "1", [KvUsage.factory])
    if args.fault == "prefill-lost":
        rng = random.Random(args.seed)
        # A first request served whole, so the pair's handshake is done.
        await one(
            args.mode, prefill, decode, [rng.randrange(3, 1000) for _ in range(args.tokens)], 2
        )
        lost = [
            await prefill_lost(
                prefill,
                decode,
                [rng.randrange(3, 1000) for _ in range(args.tokens)],
                args.timeout_s,
            )
            for _ in range(args.requests)
        ]
        prefill[0].shutdown()
        decode.shutdown()
        return {"conditions": {**vars(args), "machine": machine()}, "prefill_lost": lost}
    rng = random.Random(args.seed)
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    right = 0
    for number in range(args.requests + 1):  # the first warms the pair up (handshake)
        prompt = [rng.randrange(3, 1000) for _ in range(args.tokens)]
        try:
            got = await asyncio.wait_for(
                one(args.mode, prefill, decode, prompt, args.max_tokens), args.timeout_s
            )
        except Exception as exc:  # the probe's point is to find out
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        reference = await final(
            decode,
            prompt,
            SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True),
            f"ref-{number}",
        )
        if number:  # the warm-up is neither timed nor counted
            right += got["tokens"] == list(reference.outputs[0].token_ids)
            results.append(got)
    prefill[0].shutdown()
    decode.shutdown()
    ttfts = sorted(r["ttft_s"] * 1000 for r in results if r["ttft_s"] is not None)
    return {
        "conditions": {**vars(args), "machine": machine()},
        "served": len(results),
        "errors": errors[:5],
        "same_as_recompute": right,
        "ttft_ms": {
            **{k: round(v, 2) for k, v in summarize(ttfts).items()},
            "all": [round(t, 2) for t in ttfts],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=sorted(CONNECTORS), default="push")
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault", choices=["prefill-lost"], default=None)
    parser.add_argument("--out", default="load_tests/results/push_probe.json")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
