"""A vLLM KV connector that writes and reads whole KV payloads as files in shared memory.

It is the engine half of the Ray object-store transport. vLLM runs its scheduler and model
worker in child processes that are not Ray workers, so the connector does not touch Ray:
the prefill replica's process (a Ray actor) turns the payload file into an object in the
Ray object store, and the decode replica turns the object back into a file this connector
loads (see :mod:`app.kv.object_store`). Nothing is saved unless a request asks,
so a request that goes over NIXL pays nothing for this path.

Request ``kv_transfer_params`` keys (set by splitserve, refused from clients):

- ``splitserve_save_path``: prefill — write the prompt's KV to this file once computed;
- ``splitserve_load_path`` + ``splitserve_num_tokens``: decode — load that many prompt
  tokens' KV from this file instead of computing them.

Scheduler side (engine core process):
- ``get_num_new_matched_tokens``: may be called more than once per request; side-effect
  free except for remembering what the request asked for.
- ``update_state_after_alloc``: a load is confirmed only when blocks were allocated for it.
- ``build_connector_meta``: hands the worker this step's saves (prompts completed in
  this step) and loads (requests scheduled for the first time this step).
- ``request_finished``: forgets the request; never delays freeing its blocks (the copy is
  made during the step that computed the prompt).

Worker side (model worker process):
- ``start_load_kv``: before the forward pass, copies loaded blocks into the paged cache;
  any failure marks the request's blocks as failed (``get_block_ids_with_load_errors``),
  and the scheduler's ``kv_load_failure_policy`` decides what happens next.
- ``wait_for_save``: after the forward pass, copies the completed prompts' blocks out.
  The file appears atomically (written under a temporary name, then renamed).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from app.kv.object_store import create_private, payload_path
from app.kv.payload import (
    LOAD_PATH,
    NUM_TOKENS,
    SAVE_PATH,
    VERSION,
    LayerSlab,
    PayloadError,
    PayloadHeader,
    decode_header,
    encode_header,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = logging.getLogger("splitserve.kv")


@dataclass(frozen=True)
class SaveTask:
    path: str
    block_ids: list[int]
    num_tokens: int


@dataclass(frozen=True)
class LoadTask:
    path: str
    block_ids: list[int]  # destination blocks, in prompt order
    first_block: int  # index of block_ids[0] within the prompt (and the payload)


@dataclass
class ObjectStoreConnectorMetadata(KVConnectorMetadata):  # type: ignore[misc]
    saves: list[SaveTask] = field(default_factory=list)
    loads: list[LoadTask] = field(default_factory=list)


@dataclass
class _SaveState:
    path: str
    prompt_len: int
    block_ids: list[int] = field(default_factory=list)
    computed: int = 0


@dataclass(frozen=True)
class _LoadState:
    path: str
    start_token: int
    end_token: int


class SplitserveObjectStoreConnector(KVConnectorBase_V1):  # type: ignore[misc]
    """Saves / loads a request's prompt KV as one payload file (see module docstring)."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._block_size = int(vllm_config.cache_config.block_size)
        # scheduler side
        self._saves: dict[str, _SaveState] = {}
        self._loads: dict[str, _LoadState] = {}
        self._confirmed_loads: dict[str, _LoadState] = {}
        # worker side
        self._caches: dict[str, torch.Tensor] = {}
        self._block_dims: dict[str, int] = {}
        self._load_errors: set[int] = set()

    # ---------------- scheduler side ----------------

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        params = request.kv_transfer_params or {}
        prompt_len = len(request.prompt_token_ids or ())
        save, load = _checked(params, SAVE_PATH), _checked(params, LOAD_PATH)
        if save and request.request_id not in self._saves:
            self._saves[request.request_id] = _SaveState(save, prompt_len)
        if not load:
            return 0, False
        # Leave the last prompt token to compute: decode needs its logits.
        available = min(int(params.get(NUM_TOKENS, 0)), prompt_len) - 1
        count = max(available - num_computed_tokens, 0)
        if count:
            self._loads[request.request_id] = _LoadState(
                load, num_computed_tokens, num_computed_tokens + count
            )
        return count, False

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        load = self._loads.pop(request.request_id, None)
        if load is not None and num_external_tokens > 0:
            self._confirmed_loads[request.request_id] = load

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = ObjectStoreConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            block_ids = list(new.block_ids[0])
            load = self._confirmed_loads.pop(new.req_id, None)
            if load is not None:
                first = load.start_token // self._block_size
                last = math.ceil(load.end_token / self._block_size)
                meta.loads.append(LoadTask(load.path, block_ids[first:last], first))
            save = self._saves.get(new.req_id)
            if save is not None:
                save.block_ids = block_ids
                save.computed = new.num_computed_tokens + scheduled.get(new.req_id, 0)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            save = self._saves.get(req_id)
            if save is None:
                continue
            new_blocks = cached.new_block_ids[i]
            if new_blocks is not None:
                if req_id in cached.resumed_req_ids:
                    save.block_ids = list(new_blocks[0])
                else:
                    save.block_ids.extend(new_blocks[0])
            save.computed = cached.num_computed_tokens[i] + scheduled.get(req_id, 0)
        for req_id, save in list(self._saves.items()):
            if save.block_ids and save.computed >= save.prompt_len:
                count = math.ceil(save.prompt_len / self._block_size)
                meta.saves.append(SaveTask(save.path, save.block_ids[:count], save.prompt_len))
                del self._saves[req_id]
        return meta

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        from vllm.v1.request import RequestStatus

        if request.status is RequestStatus.FINISHED_ABORTED:
            # Aborted (client gone, prefill timeout): the replica removed the payload path
            # when it stopped waiting, but a step already running wrote it after that. The
            # abort is processed after that step, so the file exists now: remove it.
            path = _checked(request.kv_transfer_params or {}, SAVE_PATH)
            if path:
                _unlink(path)
                _unlink(path + ".tmp")
        self._saves.pop(request.request_id, None)
        self._loads.pop(request.request_id, None)
        self._confirmed_loads.pop(request.request_id, None)
        return False, None

    # ---------------- worker side ----------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        num_blocks = int(self._kv_cache_config.num_blocks)
        for name, cache in kv_caches.items():
            dims = [d for d, size in enumerate(cache.shape) if size == num_blocks]
            if not dims:
                raise ValueError(f"KV cache {name} has no dimension of {num_blocks} blocks")
            self._caches[name] = cache
            self._block_dims[name] = dims[0]

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, ObjectStoreConnectorMetadata):
            return
        for task in meta.loads:
            try:
                self._load(task)
            except (OSError, PayloadError, RuntimeError, ValueError) as exc:
                logger.warning("KV load from %s failed: %s", task.path, exc)
                self._load_errors.update(task.block_ids)
            finally:
                _unlink(task.path)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        return  # whole prompts are saved at once in wait_for_save

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, ObjectStoreConnectorMetadata):
            return
        for task in meta.saves:
            try:
                self._save(task)
            except (OSError, RuntimeError, ValueError) as exc:
                logger.warning("KV save to %s failed: %s", task.path, exc)
                _unlink(task.path + ".tmp")

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    # ---------------- helpers ----------------

    def _save(self, task: SaveTask) -> None:
        slabs: list[LayerSlab] = []
        chunks: list[np.ndarray] = []
        offset = 0
        for name, cache in self._caches.items():
            dim = self._block_dims[name]
            ids = torch.tensor(task.block_ids, dtype=torch.long, device=cache.device)
            blocks = cache.index_select(dim, ids).contiguous().cpu()
            raw = blocks.view(-1).view(torch.uint8).numpy()
            slabs.append(
                LayerSlab(
                    name=name,
                    dtype=str(cache.dtype).removeprefix("torch."),
                    shape=tuple(blocks.shape),
                    block_dim=dim,
                    offset=offset,
                    nbytes=raw.nbytes,
                )
            )
            chunks.append(raw)
            offset += raw.nbytes
        header = PayloadHeader(
            version=VERSION,
            block_size=self._block_size,
            num_tokens=task.num_tokens,
            num_blocks=len(task.block_ids),
            layers=tuple(slabs),
        )
        tmp = task.path + ".tmp"
        with os.fdopen(create_private(tmp), "wb") as out:
            out.write(encode_header(header))
            for chunk in chunks:
                out.write(chunk.tobytes() if not chunk.flags.c_contiguous else chunk.data)
        os.replace(tmp, task.path)

    def _load(self, task: LoadTask) -> None:
        data = np.fromfile(task.path, dtype=np.uint8)
        header, start = decode_header(data.data)
        if header.block_size != self._block_size:
            raise PayloadError(f"block size {header.block_size} != {self._block_size}")
        if {s.name for s in header.layers} != set(self._caches):
            raise PayloadError("payload layers do not match this engine's KV cache layers")
        if task.first_block + len(task.block_ids) > header.num_blocks:
            raise PayloadError("payload holds fewer blocks than the request needs")
        for slab in header.layers:
            cache = self._caches[slab.name]
            dim = self._block_dims[slab.name]
            expected = list(cache.shape)
            expected[dim] = header.num_blocks
            if slab.dtype != str(cache.dtype).removeprefix("torch.") or list(slab.shape) != (
                expected
            ):
                raise PayloadError(f"layer {slab.name}: payload layout does not match")
            raw = torch.from_numpy(data[start + slab.offset : start + slab.offset + slab.nbytes])
            blocks = raw.view(cache.dtype).view(slab.shape)
            source = blocks.narrow(dim, task.first_block, len(task.block_ids))
            ids = torch.tensor(task.block_ids, dtype=torch.long, device=cache.device)
            cache.index_copy_(dim, ids, source.to(cache.device))


def _checked(params: dict[str, Any], key: str) -> str | None:
    """The payload path ``params`` give under ``key``, if it is one (else None, logged)."""
    given = params.get(key)
    if not given:
        return None
    path = payload_path(given)
    if path is None:
        logger.warning("ignoring %s %r: not a KV payload file's path", key, given)
    return path


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
