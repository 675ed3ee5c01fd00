"""Per-engine costs measured on the actual hardware, and interpolation between the points.

A profile holds two curves for one engine (one accelerator, or one pinned CPU core here):
- prefill seconds vs the number of prompt tokens prefilled in one step;
- decode step seconds vs the number of sequences in the batch (at a stated context),
  and what each token of context beyond it adds to a step (``decode_context_token_s``:
  attention reads every sequence's whole KV, so a step of 16 sequences of 4,096 tokens
  takes several times one of 16 sequences of 128 tokens);
plus the serving path's fixed cost per request (``overhead_s``: HTTP, routing; and
``disaggregated_overhead_s``: the second pool's hop, the handshake and the pull), which a
bare engine profile cannot see; take them from a load test at concurrency 1. Where the
serving path shares the engines' cores, its CPU per streamed token (``token_overhead_s``)
lengthens every decode step by batch x that cost; take it from TPOT at concurrency 16.
The path's time varies from request to request: ``overhead_spread_s`` is the mean of an
exponential tail added to each request's overhead (0: a constant), fitted from the
concurrency-1 TTFT's p50 and p95 (:func:`spread_from_quantiles`).
``splitserve profile`` measures the curves (:mod:`app.planning.profiler`), alone and
beside a neighbour engine (``crowded_prefill``, ``crowded_decode``: the slowdown where
every core runs an engine); the simulator reads them from JSON.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any


def interpolate(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through ``points`` (sorted by x), extended linearly at both ends."""
    if not points:
        raise ValueError("no points to interpolate")
    if len(points) == 1:
        return points[0][1] * (x / points[0][0] if points[0][0] else 1.0)
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    i = min(max(i, 1), len(points) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    value = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return max(value, 0.0)


def spread_from_quantiles(p50_s: float, p95_s: float) -> tuple[float, float]:
    """(shift, mean) of a shifted exponential with this p50 and p95: an exponential's
    quantile q lies at mean x ln(1 / (1 - q)), so p95 - p50 = mean x ln 10."""
    mean = max(p95_s - p50_s, 0.0) / math.log(10)
    return p50_s - mean * math.log(2), mean


@dataclass
class EngineProfile:
    prefill: list[tuple[float, float]]  # (prompt tokens in the step, seconds)
    decode: list[tuple[float, float]]  # (sequences in the batch, seconds per step)
    decode_context: int = 256  # context length the decode curve was measured at
    decode_context_token_s: float = 0.0  # per token of a batch's context beyond that
    overhead_s: float = 0.0  # serving path per request, outside the engine (colocated)
    disaggregated_overhead_s: float = 0.0  # extra per disaggregated request (hops, pull)
    token_overhead_s: float = 0.0  # serving path per streamed token, added to decode steps
    overhead_spread_s: float = 0.0  # mean of an exponential tail on each request's overhead
    # How much longer prefill and decode steps take while every other core runs an
    # engine too (``splitserve profile`` with a neighbour engine): the engine's own
    # scheduler process, the serving path and the OS then have no core spare, and the
    # memory bus is shared. 1.0: not measured.
    crowded_prefill: float = 1.0
    crowded_decode: float = 1.0
    conditions: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prefill = sorted((float(x), float(y)) for x, y in self.prefill)
        self.decode = sorted((float(x), float(y)) for x, y in self.decode)
        if not self.prefill or not self.decode:
            raise ValueError("a profile needs prefill and decode points")

    def prefill_s(self, tokens: float) -> float:
        return interpolate(self.prefill, tokens) if tokens > 0 else 0.0

    def decode_step_s(self, batch: int, context_tokens: float | None = None) -> float:
        """One decode step of ``batch`` sequences, the serving path's share included.
        ``context_tokens``: the batch's tokens of context, all sequences together (None:
        each at the curve's ``decode_context``); those beyond ``batch x decode_context``
        cost ``decode_context_token_s`` each, fewer save nothing."""
        if batch <= 0:
            return 0.0
        step = interpolate(self.decode, batch) + batch * self.token_overhead_s
        if context_tokens is not None and self.decode_context_token_s:
            beyond = context_tokens - batch * self.decode_context
            step += max(beyond, 0.0) * self.decode_context_token_s
        return step

    def step_s(
        self, batch: int, prefill_tokens: float, context_tokens: float | None = None
    ) -> float:
        """One engine step that decodes ``batch`` sequences (of ``context_tokens`` in
        all) and prefills ``prefill_tokens``: each curve's point holds the step's fixed
        cost (the weights read, the launch), which a step that does both pays once, so
        the lesser of a one-sequence step and the prefill is counted once, not twice."""
        decode = self.decode_step_s(batch, context_tokens)
        prefill = self.prefill_s(prefill_tokens)
        if decode and prefill:
            return decode + prefill - min(interpolate(self.decode, 1), prefill)
        return decode + prefill

    def chunk_attention_s(self, done: float, take: float) -> float:
        """What a chunk of ``take`` prompt tokens costs beyond ``prefill_s(take)`` when
        ``done`` tokens of its prompt were prefilled in earlier steps (vLLM's chunked
        prefill): its tokens attend to those too. The prefill curve is measured on whole
        prompts, so a prompt's chunks together cost what the whole prompt does, the
        attention that grows with its length included, not its chunks' lengths' worth."""
        if done <= 0 or take <= 0:
            return 0.0
        whole = self.prefill_s(done + take) - self.prefill_s(done)
        return max(whole - self.prefill_s(take), 0.0)

    def crowded(self) -> EngineProfile:
        """This engine as it runs where every core runs an engine: its curves scaled by
        the measured factors."""
        pre, dec = self.crowded_prefill, self.crowded_decode
        return replace(
            self,
            prefill=[(x, y * pre) for x, y in self.prefill],
            decode=[(x, y * dec) for x, y in self.decode],
            decode_context_token_s=self.decode_context_token_s * dec,
            crowded_prefill=1.0,
            crowded_decode=1.0,
        )

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> EngineProfile:
        data = json.loads(Path(path).read_text())
        return cls(
            prefill=[tuple(p) for p in data["prefill"]],  # type: ignore[misc]
            decode=[tuple(p) for p in data["decode"]],  # type: ignore[misc]
            decode_context=int(data.get("decode_context", 256)),
            decode_context_token_s=float(data.get("decode_context_token_s", 0.0)),
            overhead_s=float(data.get("overhead_s", 0.0)),
            disaggregated_overhead_s=float(data.get("disaggregated_overhead_s", 0.0)),
            token_overhead_s=float(data.get("token_overhead_s", 0.0)),
            overhead_spread_s=float(data.get("overhead_spread_s", 0.0)),
            crowded_prefill=float(data.get("crowded_prefill", 1.0)),
            crowded_decode=float(data.get("crowded_decode", 1.0)),
            conditions=dict(data.get("conditions", {})),
        )
