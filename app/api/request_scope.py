"""What the HTTP layer and the engine client share about one HTTP request."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field

from app.flow.request_timings import RequestTimings
from app.observability.tracing import RequestSpan


@dataclass
class RequestScope:
    """What the HTTP layer wants back from the engine requests of one HTTP request: the
    timings of each (for the response's ``splitserve`` field), and a call when the first
    of them has its first token (admission control)."""

    timings: list[RequestTimings] = field(default_factory=list)
    on_first_token: Callable[[], None] | None = None
    arrived: float | None = None  # time.perf_counter() when the HTTP request arrived
    session_id: str | None = None  # the client's x-session-id header
    trace: RequestSpan | None = None  # the request's trace, when the app traces
    priority: int | None = None  # its priority class's engine priority, when it has one


# Set by the HTTP layer for each HTTP request it serves.
REQUEST_SCOPE: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar(
    "splitserve_request_scope", default=None
)
