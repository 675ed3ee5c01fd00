"""One sample's output as vLLM's serving layer reads it: a ``CompletionOutput`` built
from the token chunks the decode pool streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.pool.records import TokenChunk


@dataclass
class SampleOutput:
    """One sample's output so far (accumulated for non-delta output kinds), in time
    linear in its length: text parts are joined when read, logprobs extended in place."""

    index: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[Any] | None = None
    cumulative_logprob: float | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: Any = None
    num_cached_tokens: int = 0
    _parts: list[str] = field(default_factory=list)
    _started: bool = False

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def finish(self, chunk: TokenChunk) -> None:
        """Track what every output kind needs: cached tokens and the finish reason.

        Cached tokens are the first chunk's, as vLLM's streaming usage reads them (from
        the first output): the engine that computed the prompt (a first token from
        prefill carries prefill's count), not a later continuation's engine.
        """
        if not self._started:
            self._started = True
            self.num_cached_tokens = chunk.num_cached_tokens
        if chunk.finish_reason is not None:
            self.finish_reason, self.stop_reason = chunk.finish_reason, chunk.stop_reason

    def add(self, chunk: TokenChunk) -> None:
        """Accumulate ``chunk`` (cumulative and final-only outputs)."""
        self.finish(chunk)
        if chunk.text:
            self._parts.append(chunk.text)
        self.token_ids.extend(chunk.token_ids)
        if chunk.logprobs is not None:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs.extend(chunk.logprobs)
        if chunk.cumulative_logprob is not None:
            self.cumulative_logprob = chunk.cumulative_logprob
        if chunk.prompt_logprobs is not None:
            self.prompt_logprobs = chunk.prompt_logprobs


def completion_output(index: int, source: SampleOutput | TokenChunk) -> Any:
    from vllm.outputs import CompletionOutput

    return CompletionOutput(
        index=index,
        text=source.text,
        token_ids=source.token_ids,
        cumulative_logprob=source.cumulative_logprob,
        logprobs=source.logprobs,
        finish_reason=source.finish_reason,
        stop_reason=source.stop_reason,
    )
