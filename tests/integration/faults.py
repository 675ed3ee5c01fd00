"""Helpers for fault tests: find, kill and wait for Serve replicas; check KV blocks."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import ray
from ray import serve

from deployments.replicas import replica_actor_names
from load_tests.client.sse import sse_json_sync

APP = "splitserve"


def handle(deployment: str) -> Any:
    return serve.get_deployment_handle(deployment, app_name=APP)


def prefill_once(request: Any, transport: Any = None) -> Any:
    """Prefill ``request`` on the Prefill pool (NIXL by default); its PrefillResult."""
    from app.kv.fallback import Transport
    from app.pool.records import PrefillResult

    stream = (
        handle("Prefill").options(stream=True).prefill.remote(request, transport or Transport.NIXL)
    )
    results = [item for item in stream if isinstance(item, PrefillResult)]
    assert len(results) == 1, results
    return results[0]


def decode_chunks(request: Any) -> list[Any]:
    """Every TokenChunk the Decode pool streams for ``request`` (the Started marker left out)."""
    from app.pool.records import TokenChunk

    stream = handle("Decode").options(stream=True).generate.remote(request)
    return [item for item in stream if isinstance(item, TokenChunk)]


def call(deployment: str, method: str) -> Any:
    """Call a replica method and wait for it, also from inside a running event loop
    (where Serve refuses a blocking ``.result()``)."""

    def blocking() -> Any:
        return getattr(handle(deployment), method).remote().result()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return blocking()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(blocking).result()


def wait_until(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def all_blocks_free(deployment: str) -> bool:
    return bool(call(deployment, "all_blocks_free"))


def assert_no_kv_held(*deployments: str, timeout_s: float = 30.0) -> None:
    for name in deployments:
        wait_until(lambda n=name: all_blocks_free(n), timeout_s, f"{name} to free every KV block")


def kill_replica(deployment: str) -> list[int]:
    """SIGKILL the (single) replica process of ``deployment``; return its engine's PIDs."""
    info = call(deployment, "process_info")
    os.kill(int(info["pid"]), signal.SIGKILL)
    return [int(pid) for pid in info["children"]]


def wait_healthy(deployment: str, timeout_s: float = 240.0) -> None:
    def healthy() -> bool:
        status = serve.status().applications[APP]
        return bool(
            status.status == "RUNNING" and status.deployments[deployment].status == "HEALTHY"
        )

    wait_until(healthy, timeout_s, f"{deployment} to be healthy again", interval_s=2)


def wait_actor_gone(deployment: str, unique_id: str, timeout_s: float = 60.0) -> None:
    """Until Ray's GCS no longer has the replica's actor (as a decode replica asks it)."""
    from ray.serve._private.common import DeploymentID, ReplicaID

    name = ReplicaID(unique_id, DeploymentID(deployment, APP)).to_full_id_str()

    def gone() -> bool:
        try:
            ray.get_actor(name, namespace="serve")
        except ValueError:
            return True
        return False

    wait_until(gone, timeout_s, f"Ray to know replica {unique_id} dead")


def wait_processes_gone(pids: list[int], timeout_s: float = 60.0) -> None:
    def gone() -> bool:
        return not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids
        )

    wait_until(gone, timeout_s, f"engine processes {pids} to exit with their replica")


# --- a stream whose decode replica or engine dies (request migration) ---

TOKENS = 200
KILL_AFTER = 20
AFTER_CUT = 8  # tokens after a move that must match the uninterrupted run, in bfloat16
BODY = {"temperature": 0, "max_tokens": TOKENS, "ignore_eos": True, "return_token_ids": True}


def reference_run(http: Any, base: str, prompt: list[int]) -> dict[str, Any]:
    """The uninterrupted run on the same app (its text and token ids)."""
    response = http.post(f"{base}/v1/completions", json={**BODY, "prompt": prompt})
    assert response.status_code == 200, response.text
    choice: dict[str, Any] = response.json()["choices"][0]
    return choice


def stream_with_a_kill(base: str, prompt: list[int], kill: Callable[[], None]) -> list[Any]:
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
        for event in sse_json_sync(response):
            events.append(event)
            usage = event.get("usage") or {}
            if not killed and usage.get("completion_tokens", 0) >= KILL_AFTER:
                kill()
                killed = True
    assert killed, "the stream ended before the kill"
    return events


def _decode_replica_names() -> list[str]:
    return replica_actor_names(APP, "Decode")


def decode_replica_actor() -> Any:
    """The Decode replica's actor handle (Serve names it ``SERVE_REPLICA::<app>#Decode#<id>``)."""
    names = _decode_replica_names()
    assert len(names) == 1, names
    return ray.get_actor(names[0], namespace="serve")


def serving_decode_replica() -> Any:
    """The actor of the Decode replica that has a request ongoing (Serve's own count)."""
    busy: list[Any] = []
    for name in _decode_replica_names():
        actor = ray.get_actor(name, namespace="serve")
        ongoing: Any = ray.get(actor.get_num_ongoing_requests.remote())
        if ongoing > 0:
            busy.append(actor)
    assert len(busy) == 1, f"{len(busy)} decode replicas have a request ongoing"
    return busy[0]


def engine_text(prompt: list[int], tokens: list[int]) -> str:
    """The text vLLM's engine streams for ``tokens`` generated after ``prompt``.

    Its detokenizer is tokenizers' ``DecodeStream`` primed with the prompt, stepped one
    token at a time, special tokens skipped. A one-shot decode (``/detokenize``) is not
    that: it keeps special tokens (``ignore_eos`` lets the random model emit them) and ends
    with U+FFFD where the last character's bytes are incomplete, which the stream holds
    back; both differed on about half of 300 random 200-token answers.
    """
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(ids=prompt, skip_special_tokens=True)
    return "".join(stream.step(_app_tokenizer(), t) or "" for t in tokens)


@functools.cache
def _app_tokenizer() -> Any:
    """The default config's model's tokenizer (loaded once; each check reads it twice)."""
    from tokenizers import Tokenizer

    from app.model.source import resolve_model
    from load_tests.systems.local_app import config_args

    default = Path(__file__).parents[2] / "serve_configs" / "default.yaml"
    path = Path(resolve_model(config_args(default)["model"]["source"]))
    return Tokenizer.from_file(str(path / "tokenizer.json"))


def check_migrated(
    events: list[Any],
    reference: dict[str, Any],
    prompt: list[int],
    cause: str,
    exact: bool = True,
) -> None:
    """The stream moved once for ``cause`` and the client got the uninterrupted answer.

    ``exact``: token for token (a float32 model). Otherwise (bfloat16) the new engine's
    one-pass prefill of the streamed tokens may round differently from decoding them one
    by one, and on the random tiny model a near-tie can flip tens of tokens after the
    cut (docs/reliability.md): then every token streamed before the move and the first
    ``AFTER_CUT`` after it must match (a token lost or repeated at the cut shows there),
    and the text must be what an uninterrupted engine streams for those tokens
    (:func:`engine_text`).
    """
    assert not [e for e in events if "error" in e], [e for e in events if "error" in e]
    choices = [c for e in events for c in e.get("choices", [])]
    tokens = [t for c in choices for t in c.get("token_ids") or []]
    expected = reference["token_ids"]
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(tokens, expected, strict=False)) if a != b), None
    )
    [migration] = events[-1]["splitserve"]["migrations"]
    why = (
        f"{len(tokens)} tokens vs {len(expected)}; first difference at {first_diff}",
        events[-1].get("splitserve"),
    )
    text = "".join(c["text"] for c in choices)
    if exact or tokens == expected:
        assert tokens == expected, why  # token for token
        # The text too: after the move the ingress detokenizes the whole answer, so even
        # a character whose bytes span the cut is whole.
        assert text == reference["text"], (events[-1].get("splitserve"), len(text))
    else:
        checked = migration["tokens_sent"] + AFTER_CUT
        assert len(tokens) == len(expected) and tokens[:checked] == expected[:checked], why
        # The oracle is the engine's: it reproduces the uninterrupted run's text.
        assert engine_text(prompt, expected) == reference["text"]
        assert text == engine_text(prompt, tokens), (events[-1].get("splitserve"), len(text))
    final = events[-1]
    assert final["usage"]["completion_tokens"] == TOKENS
    assert final["usage"]["prompt_tokens"] == len(prompt)
    assert migration["cause"] == cause, migration
    assert migration["tokens_sent"] >= KILL_AFTER
