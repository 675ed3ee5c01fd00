"""The byte format of a KV payload: a versioned header, then each layer's blocks.

    b"SSKV" | u32 version | u32 header length | header JSON | layer 0 bytes | layer 1 bytes ...

The header lists every layer (name, dtype, shape of the saved slab, which dimension
indexes blocks), the block size and the number of prompt tokens covered. The loader
checks it against its own KV cache before copying anything: a mismatch is a load
failure (the request falls back), never silent corruption.

Changelog: version 1 — first format.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

# The kv_transfer_params keys of the object-store transport (set by splitserve only).
SAVE_PATH = "splitserve_save_path"  # prefill: write the prompt's KV payload here
LOAD_PATH = "splitserve_load_path"  # decode: load the prompt's KV from this payload
NUM_TOKENS = "splitserve_num_tokens"  # decode: prompt tokens the payload covers

MAGIC = b"SSKV"
VERSION = 1
_PREFIX = struct.Struct("<4sII")


class PayloadError(ValueError):
    """A payload that cannot be used by this engine."""


@dataclass(frozen=True)
class LayerSlab:
    """Where one layer's saved blocks sit in the payload."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    block_dim: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PayloadHeader:
    version: int
    block_size: int
    num_tokens: int
    num_blocks: int
    layers: tuple[LayerSlab, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "block_size": self.block_size,
            "num_tokens": self.num_tokens,
            "num_blocks": self.num_blocks,
            "layers": [
                {
                    "name": s.name,
                    "dtype": s.dtype,
                    "shape": list(s.shape),
                    "block_dim": s.block_dim,
                    "offset": s.offset,
                    "nbytes": s.nbytes,
                }
                for s in self.layers
            ],
        }


def encode_header(header: PayloadHeader) -> bytes:
    """The payload's leading bytes; layer offsets count from the end of these bytes."""
    body = json.dumps(header.to_json(), separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, VERSION, len(body)) + body


def decode_header(buffer: bytes | memoryview) -> tuple[PayloadHeader, int]:
    """Parse the header; return it and the offset where layer data starts."""
    view = memoryview(buffer)
    if len(view) < _PREFIX.size:
        raise PayloadError("payload too short for a header")
    magic, version, length = _PREFIX.unpack(view[: _PREFIX.size])
    if magic != MAGIC:
        raise PayloadError("not a splitserve KV payload (bad magic)")
    if version != VERSION:
        raise PayloadError(f"payload version {version}; this engine reads version {VERSION}")
    start = _PREFIX.size + length
    if len(view) < start:
        raise PayloadError("payload truncated inside its header")
    raw = json.loads(bytes(view[_PREFIX.size : start]))
    layers = tuple(
        LayerSlab(
            name=item["name"],
            dtype=item["dtype"],
            shape=tuple(item["shape"]),
            block_dim=item["block_dim"],
            offset=item["offset"],
            nbytes=item["nbytes"],
        )
        for item in raw["layers"]
    )
    header = PayloadHeader(
        version=raw["version"],
        block_size=raw["block_size"],
        num_tokens=raw["num_tokens"],
        num_blocks=raw["num_blocks"],
        layers=layers,
    )
    end = max((s.offset + s.nbytes for s in layers), default=0)
    if len(view) < start + end:
        raise PayloadError(f"payload truncated: {len(view) - start} of {end} data bytes")
    return header, start
