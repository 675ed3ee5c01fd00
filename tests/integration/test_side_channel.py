"""A running engine's NIXL handshake listener answers after malformed messages, and the
app still moves KV by NIXL afterwards (vLLM's own listener ended on the first)."""

import httpx
import msgspec
import psutil
import zmq

from tests.harness.side_channel_client import ask, metadata_request
from tests.integration.faults import call
from tests.integration.helpers import GREEDY, random_prompt

JUNK = [[b"one frame"], [b"", b"not msgpack \xc1"], [b"", msgspec.msgpack.encode([b"x", 9, 9])]]


def _side_channel(deployment: str) -> str:
    """The address of the side channel of ``deployment``'s engine, from its environment."""
    info = call(deployment, "process_info")
    for pid in info["children"]:
        try:
            environ = psutil.Process(pid).environ()
        except psutil.Error:
            continue
        if "VLLM_NIXL_SIDE_CHANNEL_PORT" in environ:
            host = environ["VLLM_NIXL_SIDE_CHANNEL_HOST"]
            return f"tcp://{host}:{environ['VLLM_NIXL_SIDE_CHANNEL_PORT']}"
    raise AssertionError(f"no engine process of {deployment} has a side channel")


def test_the_side_channel_survives_malformed_messages(apps):
    context = zmq.Context()
    try:
        for deployment in ("Prefill", "Decode"):
            address = _side_channel(deployment)
            for frames in JUNK:
                assert ask(context, address, frames, timeout_ms=300) is None
            answer = ask(context, address, metadata_request(), timeout_ms=5000)
            assert answer is not None and len(answer) == 3, (deployment, answer)
    finally:
        context.term()
    body = {**GREEDY, "max_tokens": 4, "prompt": random_prompt(31337, 700)}
    reply = httpx.post(f"{apps.disaggregated}/v1/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["splitserve"]["kv_transport"] == "nixl"
