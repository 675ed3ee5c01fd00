"""Runtime records passed between the ingress and the engine pools (frozen dataclasses).

They cross Ray process boundaries, so they hold only picklable plain data and the vLLM
`SamplingParams` built by the ingress.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """What an engine replica does in the application."""

    PREFILL = "prefill"
    DECODE = "decode"
    COLOCATED = "colocated"


@dataclass(frozen=True)
class GenerateRequest:
    """One tokenized request, as the ingress hands it to a pool."""

    request_id: str
    prompt_token_ids: list[int]
    # vllm.SamplingParams; typed loosely so this module imports without vLLM.
    sampling_params: Any
    kv_transfer_params: dict[str, Any] | None = None


@dataclass(frozen=True)
class PrefillResult:
    """What the prefill pool returns: where decode finds the prompt's KV."""

    kv_transfer_params: dict[str, Any]
    num_prompt_tokens: int
    seconds: float


@dataclass(frozen=True)
class TokenChunk:
    """Newly generated tokens for one request since the previous chunk."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0


@dataclass(frozen=True)
class EngineStats:
    """Counters read from one engine replica's vLLM Prometheus metrics."""

    role: Role
    engine_id: str
    counters: dict[str, float] = field(default_factory=dict)
