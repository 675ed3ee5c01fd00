"""The model every engine serves: `model:`."""

from __future__ import annotations

import os
import warnings
from typing import Literal

from pydantic import Field, model_validator

from app.config.base import Strict


class UnpinnedModel(UserWarning):
    """A hub model is loaded at no fixed revision."""


def _from_hub(source: str) -> bool:
    """Whether ``source`` names a hub model (``org/name``), not a builtin or a folder."""
    return (
        not source.startswith("builtin:")
        and not os.path.isdir(source)
        and source.count("/") == 1
        and not source.startswith((".", "/", "~"))
    )


class ModelConfig(Strict):
    """Which model the engines load and how vLLM runs it."""

    source: str = Field(
        "builtin:tiny-llama",
        description="`builtin:tiny-llama` (generated locally), a local HF model folder, "
        "or a hub id.",
        min_length=1,
    )
    revision: str | None = Field(
        None,
        min_length=1,
        description="A hub model's revision (a commit hash, best): weights, config and "
        "tokenizer as of it, on every host and every restart. Unset, the hub's newest is "
        "loaded wherever an engine starts (a warning says so).",
    )
    served_name: str | None = Field(
        None,
        description="Name clients put in `model`; defaults to the builtin name or `source`.",
    )
    max_model_len: int = Field(2048, gt=0, description="Longest prompt + output, in tokens.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="Weight and activation dtype (vLLM `dtype`)."
    )
    enforce_eager: bool = Field(True, description="Skip graph capture / compilation.")
    block_size: int | None = Field(
        None, gt=0, description="KV block size in tokens; None keeps vLLM's platform default."
    )
    enable_prefix_caching: bool = Field(True, description="vLLM automatic prefix caching.")
    kv_cache_gib: int = Field(
        1, gt=0, description="CPU hosts: KV cache size per engine (VLLM_CPU_KVCACHE_SPACE)."
    )
    kv_cache_blocks: int | None = Field(
        None,
        gt=0,
        description="Cap each engine's KV cache at this many blocks (vLLM's "
        "`num_gpu_blocks_override`), e.g. to measure routing under evictions; None: the "
        "memory above decides.",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="GPU hosts: share of GPU memory vLLM may use."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="Tensor parallel degree per engine.")
    seed: int = Field(0, description="Engine seed (sampling with temperature > 0).")
    max_num_seqs: int = Field(64, gt=0, description="Most sequences in one engine batch.")
    executor: Literal["auto", "uni", "mp"] = Field(
        "auto",
        description="Where the model runs: `uni` inside vLLM's engine-core process, `mp` in "
        "worker processes of their own. `auto` picks `uni` when tensor_parallel_size is 1 "
        "(vLLM's CPU platform would otherwise add a worker process per engine), else "
        "vLLM's own choice.",
    )

    structured_outputs_backend: Literal[
        "auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"
    ] = Field(
        "auto",
        description="The engines' structured-output backend (vLLM "
        "`structured_outputs_config.backend`), used by `response_format`, "
        "`structured_outputs` and tool calls that name a function or are required.",
    )

    @model_validator(mode="after")
    def _hub_models_are_pinned(self) -> ModelConfig:
        if self.revision is None and _from_hub(self.source):
            warnings.warn(
                f"model.source {self.source!r} is a hub model with no model.revision: each "
                "engine loads whatever the hub serves when it starts; pin a commit hash",
                UnpinnedModel,
                stacklevel=2,
            )
        return self

    @model_validator(mode="after")
    def _executor_fits_parallelism(self) -> ModelConfig:
        if self.executor == "uni" and self.tensor_parallel_size > 1:
            raise ValueError(
                "model.executor 'uni' runs one worker; tensor_parallel_size "
                f"{self.tensor_parallel_size} needs 'mp' (or 'auto')"
            )
        return self

    @property
    def executor_backend(self) -> Literal["uni", "mp"] | None:
        """The vLLM executor the engines are set to; None keeps vLLM's own choice (``auto``
        with tensor parallelism: ``mp``, or ``ray`` inside a Ray placement group)."""
        if self.executor != "auto":
            return self.executor
        return "uni" if self.tensor_parallel_size == 1 else None

    @property
    def name(self) -> str:
        if self.served_name:
            return self.served_name
        return self.source.removeprefix("builtin:")
