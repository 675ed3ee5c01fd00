"""A stream survives the death of its decode replica, or of its engine: the request moves.

Against the real app (one decode replica, so each move waits for Serve to replace it):
the replica killed through Ray's API after 20 of 200 tokens, then the engine process
alone killed. Each time the client's greedy text equals an uninterrupted run's, usage
counts the whole answer, the ``splitserve`` field lists the move, and afterwards no KV
block is held and no payload file is left.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import pytest
import ray

from app.kv_transport import object_store
from load_tests.stream_bench import sse_lines_sync
from tests.integration.faults import (
    APP,
    assert_no_kv_held,
    call,
    wait_healthy,
    wait_processes_gone,
)
from tests.integration.helpers import complete, random_prompt

TOKENS = 200
KILL_AFTER = 20
BODY = {"temperature": 0, "max_tokens": TOKENS, "ignore_eos": True, "return_token_ids": True}


def _reference(apps: Any, http: Any, prompt: list[int]) -> dict[str, Any]:
    """The uninterrupted run on the same app (its text and token ids)."""
    choice: dict[str, Any] = complete(http, apps.disaggregated, {**BODY, "prompt": prompt})[
        "choices"
    ][0]
    return choice


def _stream_with_a_kill(base: str, prompt: list[int], kill: Callable[[], None]) -> list[Any]:
    """Stream the completion; call ``kill`` once the client holds ``KILL_AFTER`` tokens."""
    body = {
        **BODY,
        "prompt": prompt,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events: list[Any] = []
    killed = False
    with (
        httpx.Client(timeout=600) as client,
        client.stream("POST", f"{base}/v1/completions", json=body) as response,
    ):
        assert response.status_code == 200
        for line in sse_lines_sync(response):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            events.append(event)
            usage = event.get("usage") or {}
            if not killed and usage.get("completion_tokens", 0) >= KILL_AFTER:
                kill()
                killed = True
    assert killed, "the stream ended before the kill"
    return events


def _decode_replica_actor() -> Any:
    """The Decode replica's actor handle (Serve names it ``SERVE_REPLICA::<app>#Decode#<id>``)."""
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(f"SERVE_REPLICA::{APP}#Decode#")
    ]
    assert len(names) == 1, names
    return ray.get_actor(names[0], namespace="serve")


def _check(events: list[Any], reference: dict[str, Any], prompt: list[int], cause: str) -> None:
    assert not [e for e in events if "error" in e], [e for e in events if "error" in e]
    choices = [c for e in events for c in e.get("choices", [])]
    tokens = [t for c in choices for t in c.get("token_ids") or []]
    assert tokens == reference["token_ids"]  # token for token
    # The text too: after the move the ingress detokenizes the whole answer, so even a
    # character whose bytes span the cut is whole.
    text = "".join(c["text"] for c in choices)
    assert text == reference["text"], (
        events[-1].get("splitserve"),
        len(text),
        len(reference["text"]),
    )
    final = events[-1]
    assert final["usage"]["completion_tokens"] == TOKENS
    assert final["usage"]["prompt_tokens"] == len(prompt)
    [migration] = final["splitserve"]["migrations"]
    assert migration["cause"] == cause, migration
    assert migration["tokens_sent"] >= KILL_AFTER


def _no_leak(pids: list[int]) -> None:
    wait_processes_gone(pids)
    wait_healthy("Decode")
    assert_no_kv_held("Prefill", "Decode")
    assert not list(object_store.payload_dir().glob(f"{object_store.PREFIX}*"))


@pytest.mark.kills_replica
def test_a_stream_outlives_its_decode_replica(apps, http):
    prompt = random_prompt(8100, 300)  # prefilled remotely, its KV moved over NIXL
    reference = _reference(apps, http, prompt)
    pids = [int(p) for p in call("Decode", "process_info")["children"]]
    replica = _decode_replica_actor()
    started = time.monotonic()
    events = _stream_with_a_kill(
        apps.disaggregated, prompt, lambda: ray.kill(replica, no_restart=True)
    )
    _check(events, reference, prompt, "replica_died")
    assert time.monotonic() - started < 300
    _no_leak(pids)


@pytest.mark.kills_replica
def test_a_stream_outlives_its_decode_engine(apps, http):
    prompt = random_prompt(8200, 300)
    reference = _reference(apps, http, prompt)
    info = call("Decode", "process_info")
    engines = [
        pid
        for pid in info["children"]
        if "EngineCore" in " ".join(psutil.Process(pid).cmdline()) + psutil.Process(pid).name()
    ]
    assert len(engines) == 1, info
    events = _stream_with_a_kill(
        apps.disaggregated, prompt, lambda: os.kill(engines[0], signal.SIGKILL)
    )
    _check(events, reference, prompt, "engine_died")
    _no_leak([int(p) for p in info["children"]])
