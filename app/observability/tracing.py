"""One OpenTelemetry trace per request, exported over OTLP/HTTP (``tracing:``).

:class:`Tracing` owns the ingress's tracer (its own ``TracerProvider``, not the process's
global one, which vLLM sets in the engine replicas). :meth:`Tracing.start` opens a
request's root span, continuing the client's W3C ``traceparent`` when it sent one;
:class:`RequestSpan` hands out the context for the engines (their ``llm_request`` spans
join the trace), records the stages as child spans with their measured start and end
times, and closes the root. What the stages are is the flow's to say
(:mod:`app.flow.request_trace`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from typing import Any

from app.config.tracing import TracingConfig

logger = logging.getLogger("splitserve.tracing")

ROOT_SPAN = "splitserve.request"
TRACEPARENT = "traceparent"


class RequestSpan:
    """A request's root span and what is recorded under it."""

    def __init__(self, tracer: Any, span: Any) -> None:
        self._tracer = tracer
        self.span = span
        self._ended = False

    def headers(self) -> dict[str, str]:
        """The root span's W3C trace context (``traceparent``, and ``tracestate`` when it
        has one): what the response and the engines carry."""
        from opentelemetry.trace import set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, set_span_in_context(self.span))
        return carrier

    def child(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Any] | None = None,
        events: Sequence[tuple[str, Mapping[str, Any]]] = (),
        error: str | None = None,
    ) -> None:
        """A finished stage under the root: ``name`` from ``start_ns`` to ``end_ns`` (Unix
        nanoseconds), with its attributes and events."""
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        span = self._tracer.start_span(
            name,
            context=set_span_in_context(self.span),
            start_time=start_ns,
            attributes=dict(attributes or {}),
        )
        for event, event_attributes in events:
            span.add_event(event, dict(event_attributes), timestamp=end_ns)
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=max(end_ns, start_ns))

    async def closing(self, body: AsyncIterable[Any]) -> AsyncIterator[Any]:
        """``body``, a streamed answer, closing the root span when it ends (an error if
        the client left first)."""
        error = "the client left before the answer's end"
        try:
            async for part in body:
                yield part
            error = ""
        finally:
            self.end(200, error or None)

    def end(self, status_code: int | None = None, error: str | None = None) -> None:
        """Close the root span (once), with the HTTP status and an error if the request
        failed."""
        if self._ended:
            return
        self._ended = True
        from opentelemetry.trace import Status, StatusCode

        if status_code is not None:
            self.span.set_attribute("http.response.status_code", status_code)
        if error or (status_code is not None and status_code >= 500):
            self.span.set_status(Status(StatusCode.ERROR, error or f"HTTP {status_code}"))
        self.span.end()


class Tracing:
    """The ingress's tracer; every call is a no-op when ``tracing.otlp_endpoint`` is None."""

    def __init__(self, config: TracingConfig, application: str = "", exporter: Any = None) -> None:
        """``exporter``: where spans go instead of OTLP/HTTP to ``tracing.otlp_endpoint``
        (an OpenTelemetry ``SpanExporter``, exported as each span ends; tests)."""
        self.config = config
        self._tracer: Any = None
        self._provider: Any = None
        if config.otlp_endpoint is None and exporter is None:
            return
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        resource = Resource.create(
            {"service.name": config.service_name, "splitserve.application": application}
        )
        self._provider = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio))
        )
        if exporter is not None:
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor

            self._provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            self._provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=config.otlp_endpoint))
            )
        self._tracer = self._provider.get_tracer("splitserve")

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def start(
        self, headers: Mapping[str, str], attributes: Mapping[str, Any]
    ) -> RequestSpan | None:
        """A request's root span, continuing the ``traceparent`` in ``headers``; None when
        tracing is off."""
        if self._tracer is None:
            return None
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = TraceContextTextMapPropagator().extract(
            {k: v for k, v in headers.items() if k.lower() in (TRACEPARENT, "tracestate")}
        )
        span = self._tracer.start_span(
            ROOT_SPAN, context=parent, kind=SpanKind.SERVER, attributes=dict(attributes)
        )
        return RequestSpan(self._tracer, span)

    def shutdown(self) -> None:
        """Export what is buffered and stop (a replica's exit)."""
        if self._provider is not None:
            try:
                self._provider.shutdown()
            except Exception:  # exporting must never fail a shutdown
                logger.exception("flushing the traces failed")
