"""A request mix for ``splitserve plan`` and its checks: prompt and output lengths, each
with its share of the requests."""

from __future__ import annotations

import random

DEFAULT_MIX = "128:128:0.8,1536:8:0.2"


def parse_mix(text: str) -> list[tuple[int, int, float]]:
    """``"128:128:0.8,1536:8:0.2"`` -> [(prompt, output, share), ...]; shares sum to 1."""
    mix = []
    for part in text.split(","):
        try:
            prompt, output, share = part.split(":")
            mix.append((int(prompt), int(output), float(share)))
        except ValueError:
            raise ValueError(f"bad mix entry {part!r}; want prompt:output:share") from None
    total = sum(share for _, _, share in mix)
    if not mix or abs(total - 1) > 1e-6 or any(p <= 0 or o <= 0 for p, o, _ in mix):
        raise ValueError(f"mix {text!r}: lengths must be positive and shares sum to 1")
    return mix


def mix_lengths(mix: list[tuple[int, int, float]], count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    weights = [share for _, _, share in mix]
    chosen = rng.choices(mix, weights=weights, k=count)
    return [(prompt, output) for prompt, output, _ in chosen]
