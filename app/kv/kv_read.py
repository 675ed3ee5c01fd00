"""The record of one request's KV read on a decode engine, as the connector reports it.

:class:`app.kv.timed_nixl.TimedNixlConnector` adds these keys to a decode
request's ``kv_transfer_params`` when it finishes; the replica reads them from the final
output (vLLM's engine is not imported here).
"""

from __future__ import annotations

from typing import Any

READ_BYTES = "splitserve_kv_read_bytes"
READ_SECONDS = "splitserve_kv_read_s"


def nixl_read(params: dict[str, Any]) -> tuple[int, float] | None:
    """(bytes, seconds) of a decode request's KV read, from its final output's params."""
    if READ_SECONDS not in params:
        return None
    return int(params[READ_BYTES]), float(params[READ_SECONDS])
