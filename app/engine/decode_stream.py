"""An answer's text never holds its prompt's, whatever bytes the prompt ends with.

vLLM detokenizes an answer with ``tokenizers``' ``DecodeStream``, primed with the prompt's
token ids so that the answer's first word is spaced as it follows the prompt. When the
prompt's text ends inside a character (a prompt of token ids whose last tokens are the
first bytes of a CJK character or an emoji, as a client may send; ``tokenizers`` 0.23),
the primed stream's first step returns the *whole prompt's text* with the answer's first
token: vLLM's own server streams the prompt back into the answer. Found by the chaos
soak's text oracle: 3 of its 48 random-id prompts (docs/reliability.md).

:func:`install` puts :class:`WholeCharacterDecodeStream` where vLLM looks the class up
(``tokenizers.decoders.DecodeStream``, looked up at each use so that such shims are
honoured): it primes the stream with the prompt less its trailing tokens that end inside
a character. The answer's text is then the tokenizer's decode of the answer's own ids, as
for any other prompt (a byte that completes the prompt's cut character reads U+FFFD, as it
does in that decode). Each process that detokenizes installs it: the engine replicas
(:mod:`app.engine.server`) and the ingress, which detokenizes a migrated answer
(:mod:`app.api.answer_text`).
"""

from __future__ import annotations

from typing import Any

import tokenizers.decoders

_ORIGINAL = tokenizers.decoders.DecodeStream
# Trailing tokens decoded together to judge whether the text ends inside a character: a
# UTF-8 character is at most 4 bytes, each at least one token.
_WINDOW = 8


def whole_characters(tokenizer: Any, ids: list[int], skip_special_tokens: bool) -> list[int]:
    """``ids`` less the trailing tokens whose text ends inside a character (the decode
    ends in U+FFFD, which the stream would hold back)."""
    end = len(ids)
    while end > 0:
        tail = tokenizer.decode(ids[max(0, end - _WINDOW) : end], skip_special_tokens)
        if not tail.endswith("\ufffd"):
            break
        end -= 1
    return ids[:end]


class WholeCharacterDecodeStream:
    """``tokenizers.decoders.DecodeStream``, primed with the prompt's ids up to its last
    whole character. The tokenizer comes with the first :meth:`step`, so the stream is
    built then."""

    def __init__(self, ids: list[int] | None = None, skip_special_tokens: bool = False) -> None:
        self._ids = list(ids) if ids else []
        self._skip_special_tokens = skip_special_tokens
        self._stream: Any = None
        if not self._ids:
            self._stream = _ORIGINAL(skip_special_tokens=skip_special_tokens)

    def step(self, tokenizer: Any, token_id: Any) -> str | None:
        if self._stream is None:
            primed = whole_characters(tokenizer, self._ids, self._skip_special_tokens)
            self._stream = _ORIGINAL(ids=primed, skip_special_tokens=self._skip_special_tokens)
            self._ids = []
        text: str | None = self._stream.step(tokenizer, token_id)
        return text


def install() -> None:
    """Make vLLM's detokenizer in this process use :class:`WholeCharacterDecodeStream`."""
    tokenizers.decoders.DecodeStream = WholeCharacterDecodeStream  # type: ignore[misc,assignment]
