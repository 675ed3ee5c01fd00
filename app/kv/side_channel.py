"""The NIXL handshake listener, answering only what it can read.

vLLM's NIXL connector serves each engine's handshake metadata on a ZMQ ROUTER socket (the
"side channel", ``transport.side_channel_host``): a peer sends ``(GET_META_MSG, pp_rank,
tp_rank)`` in msgpack and gets the metadata and the listener's clock. vLLM's listener
(``NixlBaseConnectorScheduler._nixl_handshake_listener``, 0.32) unpacks every message
unchecked: a message of other than three frames, a body that is not msgpack, or ranks it
does not serve raise in its thread, which then ends, and from then on no decode engine
can pair with that prefill engine; every transfer from it falls back. One stray or
hostile frame is enough.

:func:`handshake_listener` takes its place (:class:`app.kv.timed_nixl.TimedNixlConnector`
installs it on its scheduler side): the same socket, messages and answers, and a message
it cannot read is logged (the first few, then every hundredth) and dropped, so the
listener keeps serving. It also refuses a request that is not ``GET_META_MSG``, which
vLLM's would answer after a warning.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

logger = logging.getLogger("splitserve.kv")

LOGGED_IN_FULL = 5  # dropped messages logged one by one; then every hundredth


def handshake_listener(
    encoded_data: dict[tuple[int, int], Any],
    ready_event: threading.Event,
    stop_event: threading.Event,
    host: str,
    port: int,
) -> None:
    """Serve ``encoded_data`` (the metadata by (pp rank, tp rank)) on ``host``:``port``
    until ``stop_event`` is set; the signature and behaviour of vLLM's listener."""
    import msgspec
    import zmq
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata import GET_META_MSG
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.utils import zmq_ctx
    from vllm.utils.network_utils import make_zmq_path

    dropped = 0
    with zmq_ctx(zmq.ROUTER, make_zmq_path("tcp", host, port)) as sock:
        sock.setsockopt(zmq.RCVTIMEO, 1000)
        ready_event.set()
        while True:
            try:
                frames = sock.recv_multipart()
            except zmq.Again:
                if stop_event.is_set():
                    break
                continue
            try:
                identity, payload = read_request(frames, encoded_data, GET_META_MSG)
            except ValueError as exc:
                dropped += 1
                if dropped <= LOGGED_IN_FULL or dropped % 100 == 0:
                    logger.warning(
                        "NIXL side channel on %s:%d dropped a message it cannot serve "
                        "(%d so far): %s",
                        host,
                        port,
                        dropped,
                        exc,
                    )
                continue
            clock = msgspec.msgpack.encode(time.perf_counter())
            sock.send_multipart((identity, b"", payload, clock))


def read_request(
    frames: list[bytes], encoded_data: dict[tuple[int, int], Any], expected: bytes
) -> tuple[bytes, Any]:
    """The requester's identity and the metadata it asks for, from one ROUTER message;
    ``ValueError`` saying what is wrong with it otherwise."""
    import msgspec

    if len(frames) != 3:
        raise ValueError(f"{len(frames)} frames, not 3 (identity, empty, request)")
    identity, _, body = frames
    try:
        request = msgspec.msgpack.decode(body)
    except msgspec.DecodeError as exc:
        raise ValueError(f"a body that is not msgpack ({len(body)} bytes): {exc}") from None
    if not isinstance(request, list | tuple) or len(request) != 3:
        raise ValueError(f"a request that is not (message, pp rank, tp rank): {request!r:.80}")
    message, pp_rank, tp_rank = request
    if message != expected:
        raise ValueError(f"an unknown request {message!r:.40}")
    if not isinstance(pp_rank, int) or not isinstance(tp_rank, int):
        raise ValueError(f"ranks that are not integers: {pp_rank!r:.20}, {tp_rank!r:.20}")
    if (pp_rank, tp_rank) not in encoded_data:
        raise ValueError(f"ranks this engine does not serve: pp {pp_rank}, tp {tp_rank}")
    return identity, encoded_data[(pp_rank, tp_rank)]
