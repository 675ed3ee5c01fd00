"""``splitserve profile``: measure one engine's costs on this hardware.

Starts one vLLM engine (the YAML's model and settings; on CPU bound to ``cpu_binding``),
with prefix caching off so every prompt is really prefilled, then measures:
- prefill: for each prompt length, the median time of ``max_tokens=1`` requests;
- decode: for each batch size b, b prompts of ``decode_context`` tokens run once to 1
  token and once to ``steps`` tokens; step time = (difference) / (steps - 1);
- what context costs a decode step: the same at ``long_context`` tokens for the
  ``long_batches``, and the cost per token of context beyond ``decode_context``, fitted
  through those points (least squares through the short-context curve);
- crowded: where the host has cores the engine is not bound to, a neighbour engine
  (:mod:`app.planning.neighbour`) runs on them, busy, while prefill at
  ``CROWDED_LENGTHS`` and decode at ``CROWDED_BATCHES`` are measured again: each
  factor is the median ratio to the same point alone (``crowded_prefill``,
  ``crowded_decode``; 1.0 where no core is left for a neighbour).
Writes an :class:`~app.planning.engine_profile.EngineProfile` as JSON.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import time
from typing import Any

from app.config import AppConfig
from app.host import cpu_model
from app.model.source import resolve_model
from app.planning.engine_profile import EngineProfile
from app.planning.neighbour import Neighbour, other_cores

PROMPT_LENGTHS = (16, 64, 128, 256, 512, 1024, 1536)
BATCH_SIZES = (1, 2, 4, 8, 16, 32)
LONG_CONTEXT = 2048
LONG_BATCHES = (4, 16)
CROWDED_LENGTHS = (512, 1024)
CROWDED_BATCHES = (4, 16)


def context_token_cost(
    short: list[tuple[float, float]], long: list[tuple[float, float]], extra_tokens: int
) -> float:
    """Seconds per token of context beyond the short curve's: the least-squares slope,
    through the origin, of each long-context step's excess over the short-context step of
    the same batch against the batch's extra tokens (batch x ``extra_tokens``)."""
    at_short = dict(short)
    pairs = [(b * extra_tokens, s - at_short[b]) for b, s in long if b in at_short]
    denominator = sum(x * x for x, _ in pairs)
    if not denominator:
        return 0.0
    return max(sum(x * y for x, y in pairs) / denominator, 0.0)


def measure(
    config: AppConfig,
    prompt_lengths: tuple[int, ...] = PROMPT_LENGTHS,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
    decode_context: int = 128,
    long_context: int = LONG_CONTEXT,
    long_batches: tuple[int, ...] = LONG_BATCHES,
    steps: int = 32,
    repeats: int = 3,
    seed: int = 0,
    crowded: bool = True,
) -> EngineProfile:
    from vllm import LLM, SamplingParams

    model = config.model
    pool = config.decode
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(model.kv_cache_gib)
    # Of alternatives ("0|1"), the first.
    binding = pool.cpu_binding.split("|")[0] if pool.cpu_binding is not None else None
    if binding is not None:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = binding
    longest = max(max(prompt_lengths), long_context + steps) + 8
    llm = LLM(
        model=resolve_model(model.source),
        max_model_len=max(model.max_model_len, longest),
        dtype=model.dtype,
        enforce_eager=model.enforce_eager,
        enable_prefix_caching=False,
        seed=model.seed,
        max_num_seqs=max(model.max_num_seqs, max(batch_sizes)),
        max_num_batched_tokens=max(2048, longest, max(batch_sizes) * decode_context),
        # a long-context batch is prefilled in chunks; the differences below cancel it
    )
    rng = random.Random(seed)

    def prompts(count: int, length: int) -> list[Any]:
        return [
            {"prompt_token_ids": [rng.randrange(3, 1000) for _ in range(length)]}
            for _ in range(count)
        ]

    def timed(batch: list[Any], max_tokens: int) -> float:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0)
        started = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        return time.perf_counter() - started

    timed(prompts(1, 64), 4)  # warm-up
    prefill = []
    for length in prompt_lengths:
        samples = [timed(prompts(1, length), 1) for _ in range(repeats)]
        prefill.append((float(length), statistics.median(samples)))

    def step_s(batch: int, context: int) -> float:
        # The same batch run to 1 token and to ``steps`` tokens: the difference is
        # ``steps - 1`` decode steps, whatever the batched prefill cost.
        one = statistics.median(timed(prompts(batch, context), 1) for _ in range(repeats))
        many = statistics.median(timed(prompts(batch, context), steps) for _ in range(repeats))
        return max((many - one) / (steps - 1), 1e-6)

    decode = [(float(batch), step_s(batch, decode_context)) for batch in batch_sizes]
    long = [(float(batch), step_s(batch, long_context)) for batch in long_batches]
    neighbour_cores = other_cores(binding, os.cpu_count() or 1) if crowded else None
    factors = {"prefill": 1.0, "decode": 1.0}
    if neighbour_cores is not None:
        alone_prefill = dict(prefill)
        alone_decode = dict(decode)
        with Neighbour(resolve_model(model.source), neighbour_cores, model.kv_cache_gib):
            prefill_ratios = [
                statistics.median(timed(prompts(1, n), 1) for _ in range(repeats))
                / alone_prefill[float(n)]
                for n in CROWDED_LENGTHS
                if float(n) in alone_prefill
            ]
            decode_ratios = [
                step_s(b, decode_context) / alone_decode[float(b)]
                for b in CROWDED_BATCHES
                if float(b) in alone_decode
            ]
        if prefill_ratios:
            factors["prefill"] = max(statistics.median(prefill_ratios), 1.0)
        if decode_ratios:
            factors["decode"] = max(statistics.median(decode_ratios), 1.0)
    from importlib.metadata import PackageNotFoundError, version

    try:
        vllm_version = version("vllm-cpu")
    except PackageNotFoundError:
        vllm_version = version("vllm")
    return EngineProfile(
        prefill=prefill,
        decode=decode,
        decode_context=decode_context,
        decode_context_token_s=context_token_cost(decode, long, long_context - decode_context),
        crowded_prefill=round(factors["prefill"], 4),
        crowded_decode=round(factors["decode"], 4),
        conditions={
            "crowded_by": (
                f"a neighbour engine on cores {neighbour_cores}"
                if neighbour_cores is not None
                else "not measured (no core left for a neighbour)"
            ),
            "decode_at_long_context": {"context": long_context, "steps": long},
            "model": model.source,
            "cpu_binding": pool.cpu_binding,
            "host": platform.node(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "vllm": vllm_version,
            "repeats": repeats,
            "steps": steps,
        },
    )
