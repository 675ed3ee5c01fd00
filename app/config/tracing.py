"""One OpenTelemetry trace per request: `tracing:`."""

from __future__ import annotations

from pydantic import Field

from app.config.base import Strict


class TracingConfig(Strict):
    """Where the app sends its traces (OTLP over HTTP); off unless an endpoint is given."""

    otlp_endpoint: str | None = Field(
        None,
        pattern=r"^https?://[^\s]+$",
        description="OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces` (an "
        "OpenTelemetry Collector, Jaeger, Tempo). None: no tracing. The ingress sends one "
        "trace per request: a root span (`splitserve.request`, continuing the client's W3C "
        "`traceparent`, which the response returns) with spans for the ingress, the "
        "routing decision, the prefill, the KV transfer and decode, and migrations as "
        "events.",
    )
    service_name: str = Field(
        "splitserve", min_length=1, description="`service.name` of the spans."
    )
    sample_ratio: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Share of new traces recorded; a request whose `traceparent` says sampled "
        "(or not) is recorded as its parent says.",
    )
    engine_spans: bool = Field(
        True,
        description="The engines' own spans (vLLM's `llm_request`: queue, prefill and decode "
        "time in the engine) into the same trace, exported by each engine replica to the "
        "same endpoint.",
    )
