"""Conditional disaggregation: should this request be prefilled remotely or on decode?

Remote prefill pays a transfer and a hop; it only pays off when the prompt is long enough
that computing it on the decode replica would stall that replica's other streams. What
counts is what decode would compute: the prompt tokens that the decode replica holding
the conversation lacks (:mod:`app.routing.decode_affinity`). Short prompts, a
conversation's next turn whose new part is short (``decode_cached``: it is sent to that
replica), and any prompt while the prefill pool is backed up or has no replica serving
(:mod:`app.api.readiness`), are prefilled locally.
"""

from __future__ import annotations

from dataclasses import dataclass

# The reasons decide() gives of its own (a request may bring others: "prompt_logprobs",
# "parallel_sample").
REMOTE_REASONS = ("long_prompt",)
LOCAL_REASONS = ("short_prompt", "decode_cached", "prefill_unavailable", "prefill_backlog")


@dataclass(frozen=True)
class Decision:
    remote: bool
    # One of REMOTE_REASONS or LOCAL_REASONS, or the request's own reason to be prefilled
    # on decode ("prompt_logprobs", "parallel_sample").
    reason: str


def decide(
    prompt_tokens: int,
    local_below_tokens: int,
    prefill_backlog: int,
    max_prefill_backlog: int,
    required_local: str | None = None,
    prefill_serving: bool = True,
    lacking_tokens: int | None = None,
) -> Decision:
    """``lacking_tokens``: of ``prompt_tokens``, those the decode replica that would serve
    the request does not cache (None: all of them)."""
    if required_local is not None:
        return Decision(False, required_local)
    if prompt_tokens < local_below_tokens:
        return Decision(False, "short_prompt")
    if lacking_tokens is not None and lacking_tokens < local_below_tokens:
        return Decision(False, "decode_cached")
    if not prefill_serving:
        return Decision(False, "prefill_unavailable")
    if prefill_backlog >= max_prefill_backlog:
        return Decision(False, "prefill_backlog")
    return Decision(True, "long_prompt")
