"""Request helpers shared by the integration tests."""

from __future__ import annotations

import json
import random
from typing import Any

from load_tests.client.sse import DONE, sse_data_sync

GREEDY = {"temperature": 0, "max_tokens": 16, "ignore_eos": True}


def random_prompt(seed: int, length: int, last_token: int | None = None) -> list[int]:
    """A prompt of ``length`` token ids no other test uses (so no prefix cache hits)."""
    rng = random.Random(seed)
    ids = [rng.randrange(3, 1000) for _ in range(length)]
    if last_token is not None:
        ids[-1] = last_token
    return ids


def complete(
    http: Any, base: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """POST a non-streamed completion; fail loudly on a non-200."""
    response = http.post(f"{base}/v1/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def stream_events(http: Any, base: str, path: str, body: dict[str, Any]) -> list[Any]:
    """POST a streamed request and return its SSE payloads, reading until the server closes."""
    events: list[Any] = []
    with http.stream("POST", f"{base}{path}", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        for data in sse_data_sync(response):
            events.append(data if data == DONE else json.loads(data))
    return events


def streamed_text(events: list[Any]) -> str:
    assert events and events[-1] == "[DONE]", events[-3:]
    parts = []
    for event in events[:-1]:
        assert "error" not in event, event
        for choice in event["choices"]:
            parts.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(parts)
