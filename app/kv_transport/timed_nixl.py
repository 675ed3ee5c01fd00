"""vLLM's NIXL connector, reporting each request's KV read: bytes and seconds, measured.

:class:`TimedNixlConnector` is vLLM's ``NixlConnector`` (the pull connector), unchanged
but for what its scheduler side records on a decode engine:

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

from app.kv_transport.kv_read import READ_BYTES, READ_SECONDS

NAME = "TimedNixlConnector"


class TimedNixlConnector(NixlPullConnector):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._block_tokens = int(vllm_config.cache_config.block_size)
        tensors = getattr(kv_cache_config, "kv_cache_tensors", None) or ()
        blocks = int(getattr(kv_cache_config, "num_blocks", 0) or 0)
        self._block_bytes = sum(t.size for t in tensors) // blocks if blocks else 0
        self._reads: dict[str, list[float]] = {}  # request -> [start, end, bytes]

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
