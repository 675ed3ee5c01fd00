"""Builds OpenAI response bodies and SSE events from the token chunks a pool streams.

Bodies are plain dicts serialized once with ``json.dumps``: a streamed token should cost
one small string, not a pydantic model validation.
"""

from __future__ import annotations

import json
import time
from typing import Any

from app.errors import APIError
from app.openai_requests import ParsedRequest
from app.orchestrator import RequestTimings
from app.records import TokenChunk

SSE_DONE = "data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


class ResponseWriter:
    """Accumulates one request's output and renders it as OpenAI JSON or SSE events."""

    def __init__(self, request: ParsedRequest, timings: RequestTimings | None = None) -> None:
        self.request = request
        self.timings = timings
        self.created = int(time.time())
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.text: list[str] = []
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self._sent_role = False

    @property
    def _object(self) -> str:
        return "chat.completion" if self.request.kind == "chat" else "text_completion"

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.request.request_id,
            "object": obj,
            "created": self.created,
            "model": self.request.model,
            "choices": choices,
        }

    def add(self, chunk: TokenChunk) -> None:
        self.completion_tokens += len(chunk.token_ids)
        self.cached_tokens = max(self.cached_tokens, chunk.num_cached_tokens)
        self.text.append(chunk.text)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
            self.stop_reason = chunk.stop_reason

    def usage(self) -> dict[str, Any]:
        prompt = len(self.request.prompt_token_ids)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": self.completion_tokens,
            "total_tokens": prompt + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    def stream_events(self, chunk: TokenChunk) -> str:
        """Record ``chunk`` and return the SSE event(s) that carry it."""
        self.add(chunk)
        events = ""
        if self.request.kind == "chat":
            if not self._sent_role:
                self._sent_role = True
                events += sse(
                    self._envelope(
                        "chat.completion.chunk",
                        [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "finish_reason": None,
                            }
                        ],
                    )
                )
            if not chunk.text and chunk.finish_reason is None:
                return events
            choice: dict[str, Any] = {"index": 0, "delta": {"content": chunk.text}}
            obj = "chat.completion.chunk"
        else:
            if not chunk.text and chunk.finish_reason is None:
                return events
            choice = {"index": 0, "text": chunk.text}
            obj = "text_completion"
        choice["finish_reason"] = chunk.finish_reason
        if chunk.finish_reason is not None:
            choice["stop_reason"] = chunk.stop_reason
        return events + sse(self._envelope(obj, [choice]))

    def timing(self) -> dict[str, Any] | None:
        """Server-side timings and how the KV moved (a splitserve extension field)."""
        t = self.timings
        if t is None:
            return None
        report = t.transfer
        transport = report.transport
        return {
            "disaggregated": t.disaggregated,
            "decision": report.decision_reason or None,
            "prefill_engine": t.prefill_engine or None,
            "prefill_cached_tokens": t.prefill_cached_tokens,
            "decode_engine": t.decode_engine or None,
            "ttft_ms": round(t.first_token_s * 1000, 3),
            "prefill_ms": round(t.prefill_s * 1000, 3),
            "kv_transport": transport.value if transport else None,
            "kv_bytes": report.kv_bytes,
            "kv_fetch_ms": round(t.kv_fetch_s * 1000, 3),
            "decode_first_token_ms": round(t.decode_first_token_s * 1000, 3),
            "fallbacks": [
                {"transport": a.transport.value, "reason": a.reason} for a in report.fallbacks
            ],
        }

    def stream_end(self) -> str:
        """The closing events: usage and timings (if usage was asked for) and ``[DONE]``."""
        tail = ""
        if self.request.include_usage:
            obj = "chat.completion.chunk" if self.request.kind == "chat" else "text_completion"
            body = self._envelope(obj, [])
            body["usage"] = self.usage()
            timing = self.timing()
            if timing is not None:
                body["splitserve"] = timing
            tail += sse(body)
        return tail + SSE_DONE

    def full_response(self) -> dict[str, Any]:
        text = "".join(self.text)
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
            "logprobs": None,
        }
        if self.request.kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        body = self._envelope(self._object, [choice])
        body["usage"] = self.usage()
        timing = self.timing()
        if timing is not None:
            body["splitserve"] = timing
        return body


def stream_error(error: APIError) -> str:
    """An error that happens after the stream started travels as an SSE event."""
    return sse(error.body())
