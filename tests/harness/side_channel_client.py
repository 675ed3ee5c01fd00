"""A client of a NIXL handshake listener (vLLM's side channel) for tests: any frames in,
the answer or None."""

from __future__ import annotations

from typing import Any

import msgspec
import zmq


def ask(
    context: Any, address: str, frames: list[bytes], timeout_ms: int = 3000
) -> list[bytes] | None:
    """Send ``frames`` from a DEALER socket (the ROUTER adds the identity frame); the
    answer, or None when none comes within ``timeout_ms``."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
    sock.connect(address)
    try:
        sock.send_multipart(frames)
        answer: list[bytes] = sock.recv_multipart()
        return answer
    except zmq.Again:
        return None
    finally:
        sock.close()


def metadata_request(pp_rank: int = 0, tp_rank: int = 0) -> list[bytes]:
    """The frames of vLLM's own request for an engine's handshake metadata."""
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata import GET_META_MSG

    return [b"", msgspec.msgpack.encode([GET_META_MSG, pp_rank, tp_rank])]
