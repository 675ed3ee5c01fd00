"""An answer's text worked out from its token ids by vLLM's own incremental detokenizer.

After a migration (:mod:`app.flow.migration`) the ingress detokenizes the whole answer itself:
the continuation's engine sees the tokens already streamed as prompt, so its text starts
at the cut and misses a character whose bytes span it.
"""

from __future__ import annotations

from typing import Any

from app.engine import decode_stream
from app.flow.migration import AnswerText


class VllmAnswerText(AnswerText):
    """vLLM's ``IncrementalDetokenizer`` for one request, as its engine builds it.

    ``engine_request`` is the ``EngineCoreRequest`` vLLM's input processor made of the
    request (prompt ids, stop strings, ``skip_special_tokens`` ...).
    """

    def __init__(self, tokenizer: Any, engine_request: Any) -> None:
        from vllm.v1.engine.detokenizer import IncrementalDetokenizer

        decode_stream.install()
        self._detokenizer = IncrementalDetokenizer.from_new_request(tokenizer, engine_request)
        self._held_back = int(getattr(self._detokenizer, "stop_buffer_length", 0))

    @property
    def tokens(self) -> list[int]:
        return list(self._detokenizer.output_token_ids)

    @property
    def held_back(self) -> int:
        return self._held_back

    @property
    def text(self) -> str:
        return str(getattr(self._detokenizer, "output_text", ""))

    def add(self, token_ids: list[int], stop_terminated: bool) -> str | None:
        stop: str | None = self._detokenizer.update(list(token_ids), stop_terminated)
        return stop
