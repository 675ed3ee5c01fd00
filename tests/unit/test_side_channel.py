"""The NIXL handshake listener keeps serving after messages it cannot read, where vLLM's
own (0.32) ends on the first; both run for real on a loopback ZMQ socket."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import msgspec
import pytest
import zmq

from app.kv.side_channel import handshake_listener, read_request
from app.net import free_port
from tests.harness.side_channel_client import ask, metadata_request

GET_META_MSG = pytest.importorskip(
    "vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata"
).GET_META_MSG
METADATA = {(0, 0): b"the engine's metadata"}
JUNK = [
    [b"one frame"],  # the ROUTER sees identity + one frame: two, not three
    [b"", b"not msgpack \xc1"],
    [b"", msgspec.msgpack.encode("a string")],
    [b"", msgspec.msgpack.encode([b"other", 0, 0])],
    [b"", msgspec.msgpack.encode([GET_META_MSG, 5, 0])],  # ranks it does not serve
    [b"", msgspec.msgpack.encode([GET_META_MSG, [0], 0])],  # unhashable ranks
]


@contextmanager
def listening(listener: Callable[..., None]) -> Iterator[tuple[str, threading.Thread]]:
    port = free_port("127.0.0.1")
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=listener, args=(METADATA, ready, stop, "127.0.0.1", port), daemon=True
    )
    thread.start()
    assert ready.wait(10)
    try:
        yield f"tcp://127.0.0.1:{port}", thread
    finally:
        stop.set()
        thread.join(5)


def test_the_listener_answers_after_every_kind_of_junk():
    context = zmq.Context()
    try:
        with listening(handshake_listener) as (address, thread):
            for frames in JUNK:
                assert ask(context, address, frames, timeout_ms=300) is None
            answer = ask(context, address, metadata_request())
            assert answer is not None and answer[1] == METADATA[(0, 0)]
            assert thread.is_alive()
    finally:
        context.term()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_vllms_own_listener_ends_on_one_malformed_message():
    """The oracle for the test above: vLLM's listener, the same junk, no answer after."""
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_scheduler import (
        NixlBaseConnectorScheduler,
    )

    context = zmq.Context()
    try:
        with listening(NixlBaseConnectorScheduler._nixl_handshake_listener) as (address, thread):
            assert ask(context, address, metadata_request()) is not None  # it works...
            ask(context, address, JUNK[0], timeout_ms=300)
            thread.join(5)
            assert not thread.is_alive()  # ...until one frame too few
            assert ask(context, address, metadata_request(), timeout_ms=500) is None
    finally:
        context.term()


def test_read_request_says_what_is_wrong():
    with pytest.raises(ValueError, match="2 frames"):
        read_request([b"id", b"x"], METADATA, GET_META_MSG)
    with pytest.raises(ValueError, match="does not serve"):
        read_request([b"id", *JUNK[4]], METADATA, GET_META_MSG)
    assert read_request([b"id", *metadata_request()], METADATA, GET_META_MSG) == (
        b"id",
        METADATA[(0, 0)],
    )
