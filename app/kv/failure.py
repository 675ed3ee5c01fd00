"""Why one try at moving a request's KV failed: a kind for metrics, a message for people.

The kind travels with the attempt from where the failure is seen (the prefill call, the
decode replica, the ingress's timers) to the metrics (``reason`` label) and the
response's ``splitserve.fallbacks``; nothing is inferred from message text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FailureKind(StrEnum):
    PREFILL_ERROR = "prefill_error"  # the prefill call raised (engine error, replica died)
    PREFILL_TIMEOUT = "prefill_timeout"  # the prefill ran past transport.prefill_timeout_s
    PREFILL_QUEUE_TIMEOUT = "prefill_queue_timeout"  # no prefill replica took it in time
    PREFILL_BUSY = "prefill_busy"  # the prefill pool's queue was full
    OBJECT_STORE_GET = "object_store_get"  # decode could not get the KV payload
    KV_LOAD = "kv_load"  # the decode engine could not load the KV (a failed NIXL read)
    KV_EXPIRED = "kv_expired"  # the read would start after its deadline (prefill's lease)
    KV_FENCED = "kv_fenced"  # the prefill replica holding the NIXL blocks is gone: not read
    TRANSFER_TIMEOUT = "transfer_timeout"  # no first token within transport.transfer_timeout_s
    DECODE_ERROR = "decode_error"  # the decode call raised before its first token


@dataclass(frozen=True)
class TransferFailure:
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.message}"


def describe_failure(exc: BaseException) -> str:
    """A one-line reason for a failure, without a remote traceback."""
    cause = getattr(exc, "cause", None) or exc  # Ray wraps remote errors in RayTaskError
    name = type(cause).__name__
    text = str(cause).strip()
    first_line = text.splitlines()[0] if text else ""
    if "Traceback" in first_line or "ray::" in first_line:
        first_line = ""
    return f"{name}: {first_line}" if first_line else name
