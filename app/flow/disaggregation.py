"""Conditional disaggregation: should this request be prefilled remotely or on decode?

Remote prefill pays a transfer and a hop; it only pays off when the prompt is long enough
that computing it on the decode replica would stall that replica's other streams. Short
prompts, and any prompt while the prefill pool is backed up or has no replica serving
(:mod:`app.api.readiness`), are prefilled locally.
"""

from __future__ import annotations

from dataclasses import dataclass

# The reasons decide() gives of its own (a request may bring others: "prompt_logprobs",
# "parallel_sample").
REMOTE_REASONS = ("long_prompt",)
LOCAL_REASONS = ("short_prompt", "prefill_unavailable", "prefill_backlog")


@dataclass(frozen=True)
class Decision:
    remote: bool
    # "long_prompt", "short_prompt", "prefill_unavailable", "prefill_backlog", or the
    # request's own reason to be
    # prefilled on decode ("prompt_logprobs", "parallel_sample")
    reason: str


def decide(
    prompt_tokens: int,
    local_below_tokens: int,
    prefill_backlog: int,
    max_prefill_backlog: int,
    required_local: str | None = None,
    prefill_serving: bool = True,
) -> Decision:
    if required_local is not None:
        return Decision(False, required_local)
    if prompt_tokens < local_below_tokens:
        return Decision(False, "short_prompt")
    if not prefill_serving:
        return Decision(False, "prefill_unavailable")
    if prefill_backlog >= max_prefill_backlog:
        return Decision(False, "prefill_backlog")
    return Decision(True, "long_prompt")
