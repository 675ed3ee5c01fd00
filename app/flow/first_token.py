"""The answer's first token from the prefill engine, sent as soon as the prefill ends.

A remote prefill computes the prompt's KV and, to finish, samples one token anyway. By
default (``router.first_token_on_prefill``) the prefill engine samples it with the
request's own sampling parameters and the ingress streams it to the client at once,
before the KV moves: the client's TTFT is the prefill's, not the prefill's plus the
hand-off, the decode replica's queue and its first step. Then:

- **greedy** requests: decode runs as before (it loads the prompt's KV, recomputes the
  prompt's last token and samples the first token itself), and its first token, which
  repeats the one sent, is checked and dropped (:func:`without_repeat`). The answer is
  token for token what one engine computes: the later tokens come from decode steps, as
  on a colocated engine. Should decode sample another first token (a near tie that two
  engines round differently; not seen in testing), the answer goes on from the token
  sent, on decode, as a stream moved after one token does.
- **sampled** requests: decode continues from prompt + the token sent
  (:func:`app.flow.migration.continuation`): it loads the prompt's KV and computes only
  the token's. Only where the token falls inside the prompt's last KV block and does not
  complete it (:func:`continues_in_place`): vLLM's connector reads as many blocks as
  decode allocated, and caches every full block it loaded before the token's KV is
  computed. Elsewhere the token is not used and decode samples the first token.

Only for sampling a continuation cannot tell apart (:func:`first_token_allowed`): no
seed (its generator would restart on decode), no penalties on output tokens, no stop
strings (one could span the two engines' parts), no logprobs, no structured output.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.flow.migration import continuation
from app.pool.records import GenerateRequest, TokenChunk

# vLLM samples greedily below this temperature (vllm.sampling_params._SAMPLING_EPS).
_GREEDY_BELOW = 1e-5


class Diverged(Exception):
    """Decode's first token is not the one the prefill sampled and the client has."""


def first_token_allowed(params: Any) -> bool:
    """Whether a request with vLLM ``SamplingParams`` ``params`` may take its first
    token from the prefill engine."""
    return (
        params.n == 1
        and (params.max_tokens is None or params.max_tokens >= 1)
        and params.seed is None
        and params.logprobs is None
        and params.prompt_logprobs is None
        and not params.stop
        and not params.presence_penalty
        and not params.frequency_penalty
        and params.repetition_penalty == 1.0
        and params.structured_outputs is None
        and not params.bad_words
    )


def is_greedy(params: Any) -> bool:
    """Whether ``params`` decode greedily (the answer is a function of the prompt)."""
    return bool(params.temperature < _GREEDY_BELOW)


def without_repeat(chunk: TokenChunk, sent: TokenChunk) -> TokenChunk | None:
    """Decode's first chunk less the first token, which repeats ``sent`` (None when
    nothing else is in it). Raises :class:`Diverged` when it is another token."""
    count = len(sent.token_ids)
    if chunk.token_ids[:count] != sent.token_ids or not chunk.text.startswith(sent.text):
        raise Diverged(
            f"decode's first token {chunk.token_ids[:count]} is not prefill's {sent.token_ids}"
        )
    rest = chunk.token_ids[count:]
    if not rest and chunk.finish_reason is None:
        return None
    return replace(chunk, text=chunk.text[len(sent.text) :], token_ids=rest)


def continues_in_place(num_prompt_tokens: int, block_tokens: int) -> bool:
    """Whether decode can continue from prompt + one token on the prefill's blocks: the
    token's position neither starts a new block nor ends one."""
    if block_tokens <= 0:
        return False
    return num_prompt_tokens % block_tokens not in (0, block_tokens - 1)


def whole_text(sent: TokenChunk, params: Any) -> bool:
    """Whether the client may have ``sent``, the prefill's first token, as the answer's
    start: its text is whole characters, or no text follows it.

    A token that is only part of a character (the first byte of a CJK character or an
    emoji) has no text yet. Decode, going on from prompt + that token, would start its
    detokenizer inside the character, and vLLM's (``tokenizers``' ``DecodeStream``
    primed with those ids) then streams the whole prompt's text with the character.
    Such a token is not sent; decode samples the first token itself.
    """
    if sent.finish_reason is not None or not getattr(params, "detokenize", True):
        return True
    return bool(sent.text) and not sent.text.endswith("\ufffd")


def after_first_token(request: GenerateRequest, sent: TokenChunk) -> GenerateRequest:
    """The request that continues ``request``'s answer after its first token ``sent``,
    as a stream moved after one token does (:func:`app.flow.migration.continuation`)."""
    return replace(
        continuation(request, sent.token_ids, 0),
        request_id=f"{request.request_id}.c",
        origin_id=request.origin_id or request.request_id,
    )
