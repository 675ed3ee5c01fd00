"""vLLM's NIXL connector, refusing late reads and reporting each read: bytes and seconds.

:class:`TimedNixlConnector` is vLLM's ``NixlConnector`` (the pull connector), unchanged
but for two things on a decode engine, and, on every engine, a handshake listener that a
malformed message does not end (:mod:`app.kv.side_channel`).

It refuses a read whose deadline has passed (:mod:`app.kv.read_deadline`): the
scheduler side passes each new read's deadline to the worker side with the step's
metadata, and the worker side fails a late read before it starts, as vLLM fails a read
it cannot make (the request ends with ``finish_reason`` "error"; no block is read).

And it records each read, on its scheduler side:

- when the scheduler allocates blocks for a request whose KV is remote, the read starts
  (``update_state_after_alloc`` with external tokens): the time and the blocks to read;
- when the worker reports the read done (``update_connector_output``'s
  ``finished_recving``), it ends;
- when the request finishes, both go back in the request's ``kv_transfer_params``
  (``request_finished``), which vLLM hands to the replica on the final output.

The bytes are the blocks read times the engine's bytes per block (every layer), as
NIXL moves whole blocks. The seconds run from the scheduler's allocation to the step
that saw the read finished: the read, plus at most one engine step. vLLM loads this
class by module path (``kv_connector_module_path``), in the engine-core process.
"""

from __future__ import annotations

import math
import time
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPullConnector

from app.kv import side_channel
from app.kv.kv_read import READ_BYTES, READ_SECONDS
from app.kv.read_deadline import READ_BY, READER, RefusedReads, late_reads

NAME = "TimedNixlConnector"


class TimedNixlConnector(NixlPullConnector):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._block_tokens = int(vllm_config.cache_config.block_size)
        tensors = getattr(kv_cache_config, "kv_cache_tensors", None) or ()
        blocks = int(getattr(kv_cache_config, "num_blocks", 0) or 0)
        self._block_bytes = sum(t.size for t in tensors) // blocks if blocks else 0
        self._reads: dict[str, list[float]] = {}  # request -> [start, end, bytes]
        self.refused_reads = RefusedReads()  # worker side: reads refused as late
        if self.connector_scheduler is not None:
            # A handshake listener that a malformed message does not end (app.kv.side_channel).
            scheduler: Any = self.connector_scheduler
            scheduler._nixl_handshake_listener = side_channel.handshake_listener

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        # The deadlines of the reads this step starts (the base clears its list of them).
        scheduler = self.connector_scheduler
        assert scheduler is not None
        deadlines = {
            request_id: (float(params[READ_BY]), str(params.get(READER, request_id)))
            for request_id, (request, *_) in scheduler._reqs_need_recv.items()
            if (params := request.kv_transfer_params) and params.get(READ_BY) is not None
        }
        metadata: Any = super().build_connector_meta(scheduler_output)
        metadata.splitserve_read_by = deadlines
        return metadata

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        metadata: Any = self._get_connector_metadata()
        read_by: dict[str, tuple[float, str]] = getattr(metadata, "splitserve_read_by", {})
        deadlines = {request_id: deadline for request_id, (deadline, _) in read_by.items()}
        awaiting = [rid for rid, meta in metadata.reqs_to_recv.items() if meta.awaiting_kvs]
        for request_id in late_reads(deadlines, awaiting, time.time()):
            self._refuse(request_id, metadata.reqs_to_recv.pop(request_id))
            self.refused_reads.add(read_by[request_id][1])
        super().start_load_kv(forward_context, **kwargs)

    def _refuse(self, request_id: str, meta: Any) -> None:
        """Fail a read before it starts, the way vLLM fails one whose peer it cannot reach:
        the scheduler then ends the request with an error (``kv_load_failure_policy``
        "fail") and frees its blocks; prefill's lease frees the remote ones."""
        worker = self.connector_worker
        assert worker is not None
        meta.local_physical_block_ids = worker._logical_to_kernel_block_ids(
            meta.local_block_ids, worker._physical_blocks_per_logical_kv_block
        )
        worker._recving_metadata[request_id] = meta
        worker._handle_failed_transfer(
            request_id, None, worker._recv_failures, record_failed_transfer=False
        )
        worker.xfer_stats.record_kv_expired_req()  # type: ignore[no-untyped-call]

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> Any:
        if num_external_tokens > 0:
            nbytes = math.ceil(num_external_tokens / self._block_tokens) * self._block_bytes
            self._reads[request.request_id] = [time.monotonic(), 0.0, float(nbytes)]
        return super().update_state_after_alloc(request, blocks, num_external_tokens)

    def update_connector_output(self, connector_output: Any) -> None:
        now = time.monotonic()
        for request_id in connector_output.finished_recving or ():
            read = self._reads.get(request_id)
            if read is not None and not read[1]:
                read[1] = now
        super().update_connector_output(connector_output)

    def request_finished(
        self, request: Any, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self._with_read(request, super().request_finished(request, block_ids))

    def request_finished_all_groups(
        self, request: Any, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self._with_read(request, super().request_finished_all_groups(request, block_ids))

    def _with_read(
        self, request: Any, finished: tuple[bool, dict[str, Any] | None]
    ) -> tuple[bool, dict[str, Any] | None]:
        read = self._reads.pop(request.request_id, None)
        if read is None or not read[1]:
            return finished
        delay_free, params = finished
        report = {READ_BYTES: int(read[2]), READ_SECONDS: read[1] - read[0]}
        return delay_free, {**(params or {}), **report}


def register() -> None:
    """Make the connector known by name in this process, as vLLM's own are.

    vLLM finds it by module path where it builds it (the engine-core process); the
    engine's client process needs the name too, to read the NIXL stats a MultiConnector
    reports by connector name.
    """
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    if NAME not in KVConnectorFactory._registry:
        KVConnectorFactory.register_connector(NAME, __name__, TimedNixlConnector.__name__)
