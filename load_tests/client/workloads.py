"""Request mixes for load tests: each yields (prompt token ids, max_tokens) pairs.

Prompts are random token ids (the builtin model's vocabulary is ~1k), seeded, so runs
are repeatable and no prefix is shared unless the workload shares it on purpose.
"""

from __future__ import annotations

import random
from collections.abc import Callable

Request = tuple[list[int], int]


def rate_rng(seed: int, rate: float) -> random.Random:
    """The generator for one rate of a sweep. Every rate tried gets prompts of its own: with
    one seed for all, each rate re-sent the earlier rates' prompts, which the engines then
    answered from their prefix caches, so later rates measured cached prefills."""
    return random.Random(f"{seed}:{float(rate)!r}")


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, 1000) for _ in range(n)]


def fixed(
    rng: random.Random, count: int, input_len: int = 128, output_len: int = 128
) -> list[Request]:
    return [(_tokens(rng, input_len), output_len) for _ in range(count)]


def mixed(
    rng: random.Random, count: int, long_share: float = 0.2, long_len: int = 1536
) -> list[Request]:
    """Streams interrupted by long prompts: 80% 128-in/128-out, 20% 1536-in/8-out
    (the first baseline's mix; needs a context of at least 1,544 tokens)."""
    return [
        (_tokens(rng, long_len), 8) if rng.random() < long_share else (_tokens(rng, 128), 128)
        for _ in range(count)
    ]


def shared_prefix(
    rng: random.Random, count: int, systems: int = 8, system_len: int = 384
) -> list[Request]:
    """``systems`` shared system prompts, each followed by a short question."""
    heads = [_tokens(rng, system_len) for _ in range(systems)]
    return [(rng.choice(heads) + _tokens(rng, rng.randint(16, 48)), 32) for _ in range(count)]


WORKLOADS: dict[str, Callable[[random.Random, int], list[Request]]] = {
    "fixed": fixed,
    "mixed": mixed,
    "shared-prefix": shared_prefix,
}
