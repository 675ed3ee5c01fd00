"""The text oracle: an answer's text against the tokenizer's decode of its token ids."""

from __future__ import annotations


def text_matches(text: str, decoded: str) -> bool:
    """Whether ``text`` (an answer's streamed or returned text) is ``decoded`` (the
    tokenizer's decode of the answer's token ids). An answer cut inside a character ends
    in U+FFFD when decoded whole, and the engine's text leaves that character out."""
    return text == decoded or (
        decoded.startswith(text) and not decoded[len(text) :].strip("\ufffd")
    )


def echoes(text: str, prompt_text: str, span: int = 48) -> bool:
    """Whether ``text`` holds the start of its prompt's text (a detokenizer primed with
    the prompt, streaming it into the answer)."""
    head = prompt_text.strip()[:span]
    return len(head) >= 8 and head in text
