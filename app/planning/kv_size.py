"""How many bytes of KV cache a token, and a prompt, make; how long they take to move.

Standard attention (MHA/GQA/MQA) keeps a key and a value vector per KV head per layer:
``bytes per token = 2 x layers x KV heads x head dim x bytes per element``. A 70B GQA model
(80 layers, 8 KV heads of 128) in 16-bit holds 327,680 bytes per token, so a 4,096-token
prompt makes 1.34 GB, which takes 107 ms at 100 Gb/s and 27 ms at 400 Gb/s at line rate.

MLA (DeepSeek-V2/V3 style) caches one compressed latent per layer instead of K and V:
``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``, the same on every tensor-parallel
rank (the latent is not split by head). With tensor parallelism, GQA's KV heads are split
over the ranks (each rank keeps at least one head, so heads are replicated when there are
more ranks than KV heads); every rank's share crosses the network in a transfer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

NetworkKind = Literal["rdma", "tcp"]

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "int8": 1,
}

# Share of the line rate a KV transfer reaches, by network kind (tunable per call).
# RDMA moves large registered buffers at close to line rate; a TCP stream pays copies and
# protocol processing on both hosts.
LINK_EFFICIENCY: dict[str, float] = {"rdma": 0.9, "tcp": 0.5}


def dtype_bytes(name: str) -> int:
    try:
        return _DTYPE_BYTES[name.lower().removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unknown KV dtype {name!r}; one of {sorted(_DTYPE_BYTES)}") from None


@dataclass(frozen=True)
class KVShape:
    """What of a model's attention the KV cache stores."""

    layers: int
    kv_heads: int = 0  # standard attention; 0 for MLA
    head_dim: int = 0
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim; 0 for standard attention
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.layers <= 0:
            raise ValueError("layers must be positive")
        if self.latent_dim <= 0 and (self.kv_heads <= 0 or self.head_dim <= 0):
            raise ValueError("need kv_heads and head_dim (or an MLA latent_dim)")
        dtype_bytes(self.dtype)

    @property
    def is_mla(self) -> bool:
        return self.latent_dim > 0

    def bytes_per_token_per_rank(self, tensor_parallel: int = 1, kv_dtype: str = "auto") -> int:
        """KV bytes one tensor-parallel rank keeps for one token."""
        if tensor_parallel < 1:
            raise ValueError("tensor_parallel must be >= 1")
        element = dtype_bytes(self.dtype if kv_dtype == "auto" else kv_dtype)
        if self.is_mla:
            return self.layers * self.latent_dim * element
        heads_per_rank = max(1, -(-self.kv_heads // tensor_parallel))
        return 2 * self.layers * heads_per_rank * self.head_dim * element

    def bytes_per_token(self, tensor_parallel: int = 1, kv_dtype: str = "auto") -> int:
        """KV bytes all ranks together keep (and a transfer moves) for one token."""
        return self.bytes_per_token_per_rank(tensor_parallel, kv_dtype) * tensor_parallel

    def bytes_per_request(
        self, prompt_tokens: int, tensor_parallel: int = 1, kv_dtype: str = "auto"
    ) -> int:
        return prompt_tokens * self.bytes_per_token(tensor_parallel, kv_dtype)


def shape_from_config(config: dict[str, Any]) -> KVShape:
    """The KV shape of a Hugging Face ``config.json`` (Llama/Qwen/Mistral/DeepSeek style)."""
    text = config.get("text_config")
    if isinstance(text, dict):  # multimodal wrappers keep the language model's config here
        config = {**config, **text}
    try:
        layers = int(config["num_hidden_layers"])
    except KeyError:
        raise ValueError("config has no num_hidden_layers") from None
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if config.get("kv_lora_rank"):
        latent = int(config["kv_lora_rank"]) + int(config.get("qk_rope_head_dim") or 0)
        return KVShape(layers=layers, latent_dim=latent, dtype=dtype)
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    return KVShape(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)


def shape_from_model(source: str) -> KVShape:
    """The KV shape of a ``config.json`` file, a model directory, a builtin model
    (``builtin:tiny-llama``), or a serve config YAML (its app's ``model.source``)."""
    path = Path(source)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        from app.config import AppConfig, serve_file_args

        return shape_from_model(AppConfig.model_validate(serve_file_args(path)).model.source)
    if not path.exists():
        from app.model.source import is_builtin, resolve_model

        if not is_builtin(source):
            raise ValueError(
                f"{source!r} is not a config.json, a model directory, a builtin model or a "
                "serve config YAML here. A hub id is not fetched: download the model's "
                "config.json and pass its path"
            )
        path = Path(resolve_model(source))
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable model config.json ({exc})") from None
    return shape_from_config(config)


def wire_seconds(nbytes: float, gbit_per_s: float) -> float:
    """Seconds to send ``nbytes`` at the full line rate (the floor under any transfer)."""
    if gbit_per_s <= 0:
        raise ValueError("link rate must be positive")
    return nbytes * 8 / (gbit_per_s * 1e9)


def transfer_seconds(
    nbytes: float,
    gbit_per_s: float,
    kind: NetworkKind = "rdma",
    efficiency: float | None = None,
    latency_s: float = 0.0,
) -> float:
    """Expected seconds for one KV transfer: line rate scaled by the link's efficiency."""
    share = LINK_EFFICIENCY[kind] if efficiency is None else efficiency
    if not 0 < share <= 1:
        raise ValueError("efficiency must be in (0, 1]")
    return latency_s + wire_seconds(nbytes, gbit_per_s) / share
