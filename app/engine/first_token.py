"""The prefill engine's side of the answer's first token (:mod:`app.flow.first_token`):
the sampling parameters it prefills with, and its one output as the answer's first chunk."""

from __future__ import annotations

from typing import Any

from app.pool.records import TokenChunk


def sampled_first_token(
    completion: Any, max_tokens: int | None, num_cached_tokens: int = 0
) -> TokenChunk:
    """The prefill's one ``CompletionOutput`` as the answer's first chunk. Its "length"
    finish is this call's one token, the answer's end only where the answer is one
    token long (``max_tokens``). It carries the prefill's prefix-cache hits: the prompt
    tokens this request did not compute (what colocated serving reports as cached)."""
    finish = completion.finish_reason
    if finish == "length" and max_tokens != 1:
        finish = None
    return TokenChunk(
        text=completion.text,
        token_ids=list(completion.token_ids),
        finish_reason=finish,
        stop_reason=completion.stop_reason,
        num_cached_tokens=num_cached_tokens,
    )


def first_token_params(params: Any) -> Any:
    """The prefill's sampling parameters: the request's, for one token, whole."""
    from vllm.sampling_params import RequestOutputKind

    one = params.clone()
    one.max_tokens = 1
    one.min_tokens = min(one.min_tokens or 0, 1)
    one.output_kind = RequestOutputKind.FINAL_ONLY
    return one
