"""Where one request's time went: the record the orchestrator fills as a request runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.flow.migration import Migration
from app.kv.fallback import TransferReport, Transport


@dataclass
class RequestTimings:
    """Where one request's time went, in seconds, and how its KV moved (filled as it runs)."""

    # From the HTTP request's arrival at the ingress to the pools being asked: parsing,
    # vLLM's request processing, and the ingress's own event loop under load.
    ingress_s: float = 0.0
    prefill_queue_s: float = 0.0  # waiting for a prefill replica (Serve's queue)
    prefill_s: float = 0.0  # the prefill itself, once a replica started it
    decode_queue_s: float = 0.0  # waiting for a decode replica (Serve's queue)
    kv_fetch_s: float = 0.0
    decode_first_token_s: float = 0.0  # decode replica started it -> first token
    first_token_s: float = 0.0
    total_s: float = 0.0
    transfer: TransferReport = field(default_factory=TransferReport)
    prefill_engine: str = ""
    prefill_cached_tokens: int = 0
    # Prompt tokens the prefix router took the prefill (or colocated) replica to hold
    # (app.routing.routed_expectations); None: no prefix router chose it.
    routed_cached_tokens: int | None = None
    decode_engine: str = ""
    token_gaps_s: list[float] = field(default_factory=list)  # between token chunks (ITL)
    prompt_tokens: int = 0
    output_tokens: int = 0
    migrations: list[Migration] = field(default_factory=list)  # streams moved to a replica

    @property
    def disaggregated(self) -> bool:
        """Whether a remote prefill served the request (not a local prefill on decode)."""
        return self.transfer.transport not in (None, Transport.RECOMPUTE)
