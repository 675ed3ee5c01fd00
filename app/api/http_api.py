"""The OpenAI HTTP API as a Starlette app: routes onto vLLM's own serving classes.

vLLM's layer (:mod:`app.api.openai_serving`) validates, renders and answers each request;
this module adds what splitserve promises on top: the API key, checked first; the
request's priority class (:mod:`app.api.priority_class`); admission by its class's share,
with the slot given back however the request ends; one trace per request when tracing;
the body read and checked by :mod:`app.api.request_body` (limits, clear errors for
malformed bodies, refusal of any client field that steers KV transfer); and the
``splitserve`` field (server-side timings and how the KV moved) when usage is sent.
A stream that fails before its first event is answered with a plain HTTP error.

``GET /metrics`` serves Prometheus text (:mod:`app.observability.metrics_page`) and this
replica's admission gauges. As on vLLM's server, scrapers need no key, unless
``ingress.metrics_require_api_key``; the key guards the ``/v1`` and tokenization routes.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.api.admission import Admission, Overloaded, Reason, Ticket
from app.api.error_responses import error_json, error_response, generic_body, incident_id
from app.api.errors import APIError
from app.api.openai_serving import OpenAIServing
from app.api.priority_class import request_class
from app.api.readiness import Readiness
from app.api.request_body import check_body, read_json, samples, validate
from app.api.request_report import splitserve_field
from app.api.request_scope import REQUEST_SCOPE, RequestScope
from app.api.sse_report import SSE_DONE, error_event, with_report
from app.config import IngressConfig, PriorityClass, PriorityConfig
from app.observability.metrics_page import CONTENT_TYPE
from app.observability.tracing import RequestSpan, Tracing

logger = logging.getLogger("splitserve.http")

Handler = Callable[[Any, Request], Awaitable[Any]]
MetricsPage = Callable[[], Awaitable[str]]


class OpenAIServer:
    """Serves one model's OpenAI endpoints through vLLM's serving classes."""

    def __init__(
        self,
        serving: OpenAIServing,
        config: IngressConfig,
        api_key: str | tuple[str, ...] | None,
        metrics_page: MetricsPage | None = None,
        on_arrival: Callable[[], None] | None = None,
        readiness: Readiness | None = None,
        on_refuse: Callable[[Reason], None] | None = None,
        tracing: Tracing | None = None,
        priority: PriorityConfig | None = None,
    ) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest
        from vllm.entrypoints.serve.tokenize.protocol import DetokenizeRequest, TokenizeRequest

        self.serving = serving
        self.config = config
        # Any of these keys is accepted (a rotation keeps the old one a while).
        self.api_keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
        self.metrics_page = metrics_page
        self.on_arrival = on_arrival  # each generation request, before admission
        # None: the pools are taken as ready (tests over fake pools).
        self.readiness = readiness
        # Named classes a request picks by header (priority: in the config).
        self.priority = priority if priority is not None and priority.enabled else None
        # One trace per generation request (tracing: in the config), or None.
        self.tracing = tracing if tracing is not None and tracing.enabled else None
        self.admission = Admission.of(config.admission, on_refuse=on_refuse)
        self._completion = TypeAdapter(CompletionRequest)
        self._chat = TypeAdapter(ChatCompletionRequest)
        self._tokenize = TypeAdapter(TokenizeRequest)
        self._detokenize = TypeAdapter(DetokenizeRequest)

    def asgi_app(self) -> Starlette:
        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ]
        return Starlette(
            routes=routes,
            exception_handlers={HTTPException: self._http_exception},
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        if self.readiness is not None:
            self.readiness.start()  # ask the pools from the start, not at the first request
        yield

    async def _http_exception(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == HTTPStatus.NOT_FOUND:
            message = f"no route for {request.method} {request.url.path}"
        elif exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(APIError(message, exc.status_code))

    async def health(self, request: Request) -> Response:
        if self.readiness is None:
            return Response(status_code=200)
        self.readiness.start()
        health = self.readiness.health()
        headers = (
            None if health.retry_after_s is None else {"Retry-After": str(health.retry_after_s)}
        )
        return JSONResponse(health.body, status_code=health.status, headers=headers)

    def _not_ready(self) -> Overloaded | None:
        """The refusal (not counted yet) of an API request that comes before every pool
        serves warm, else None."""
        if self.readiness is None:
            return None
        self.readiness.start()
        if self.readiness.ready:
            return None
        return Overloaded(
            self.readiness.not_ready_error(), self.readiness.retry_after_s, Reason.NOT_READY
        )

    def _refused(self, refused: Overloaded) -> Response:
        """A refusal counted and sent: 503 with its Retry-After."""
        self.admission.count(refused)
        error = APIError(str(refused), HTTPStatus.SERVICE_UNAVAILABLE)
        return error_json(error.body(), error.status, refused.retry_after_s)

    async def _refused_unless_bad(
        self, request: Request, model: TypeAdapter[Any], refused: Overloaded
    ) -> Response:
        """A request that is not admitted (not ready, overloaded): its body is still read
        and checked (within the body's size and time limits, holding no slot), so bad
        input is a 4xx whatever the load, as on vLLM's server; good input is refused."""
        try:
            await self._parse(request, model)
        except APIError as error:
            return error_response(error)
        return self._refused(refused)

    async def metrics(self, request: Request) -> Response:
        if self.config.metrics_require_api_key:
            try:
                self._authorize(request)
            except APIError as error:
                return error_response(error)
        if self.metrics_page is None:
            return error_response(APIError("this server exports no metrics", HTTPStatus.NOT_FOUND))
        try:
            page = await self.metrics_page() + self._admission_gauges()
        except Exception as exc:
            incident = incident_id()
            logger.warning("reading the metrics export failed [%s]: %s", incident, exc)
            message = f"metrics are unavailable now; the server log has why [{incident}]"
            return error_response(APIError(message, HTTPStatus.SERVICE_UNAVAILABLE))
        return Response(page, media_type=CONTENT_TYPE)

    def _admission_gauges(self) -> str:
        """This replica's admission state now (not through Ray's export, which lags by its
        interval): what a leak would show as a count that never returns to 0."""
        return (
            "# HELP splitserve_admission_waiting Engine requests admitted by this ingress "
            "replica that wait for a first token, now.\n"
            "# TYPE splitserve_admission_waiting gauge\n"
            f"splitserve_admission_waiting {self.admission.waiting}\n"
            "# HELP splitserve_admission_parsing Admitted requests of this ingress replica "
            "whose body is still being read, now.\n"
            "# TYPE splitserve_admission_parsing gauge\n"
            f"splitserve_admission_parsing {self.admission.parsing}\n"
        )

    async def models(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except APIError as error:
            return error_response(error)
        not_ready = self._not_ready()
        if not_ready is not None:
            return self._refused(not_ready)
        listing = await self.serving.models.show_available_models()
        return JSONResponse(listing.model_dump())

    async def completions(self, request: Request) -> Response:
        return await self._generate(
            request, self._completion, self.serving.completion.create_completion
        )

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, self._chat, self.serving.chat.create_chat_completion)

    async def tokenize(self, request: Request) -> Response:
        return await self._answer(
            request, self._tokenize, self.serving.tokenization.create_tokenize
        )

    async def detokenize(self, request: Request) -> Response:
        return await self._answer(
            request, self._detokenize, self.serving.tokenization.create_detokenize
        )

    async def _answer(
        self, request: Request, model: TypeAdapter[Any], handler: Handler
    ) -> Response:
        try:
            self._authorize(request)
            parsed = await self._parse(request, model)
            result = await handler(parsed, request)
        except APIError as error:
            return error_response(error)
        except Exception as exc:
            return self._vllm_error(exc)
        return self._json_result(result)

    async def _generate(
        self, request: Request, model: TypeAdapter[Any], handler: Handler
    ) -> Response:
        arrived = time.perf_counter()
        try:
            # The key first: a client without it costs a comparison, holds no slot and
            # is no demand for the autoscaler.
            self._authorize(request)
        except APIError as error:
            return error_response(error)
        route = {"http.route": request.url.path}
        trace = self.tracing.start(request.headers, route) if self.tracing else None
        if trace is None:
            return await self._serve(request, model, handler, arrived, None)
        try:
            response = await self._serve(request, model, handler, arrived, trace)
        except BaseException:
            trace.end(error="the request was cancelled")
            raise
        response.headers.update(trace.headers())
        if isinstance(response, StreamingResponse):
            response.body_iterator = trace.closing(response.body_iterator)
        else:
            trace.end(response.status_code)
        return response

    async def _serve(
        self,
        request: Request,
        model: TypeAdapter[Any],
        handler: Handler,
        arrived: float,
        trace: RequestSpan | None,
    ) -> Response:
        # Admitted (or refused) as it arrives, before its body is parsed: requests still
        # being parsed count as waiting, and a request found bad leaves the queue at once.
        # A refused request's body is read and checked too, holding no slot: bad input
        # is a 400 under any load (a check costs about 25 µs).
        try:
            chosen = request_class(self.priority, request.headers)
        except APIError as error:
            return error_response(error)
        share = chosen[1].admission_share if chosen is not None else 1.0
        refused = self._not_ready() or self.admission.refusal(share)
        if refused is not None:
            return await self._refused_unless_bad(request, model, refused)
        ticket = self.admission.enter()
        try:
            parsed = await self._parse(request, model)
        except APIError as error:
            ticket.done()
            return error_response(error)
        except BaseException:  # the client left, or the task was cancelled: slot back
            ticket.done()
            raise
        ticket.parsed(samples(parsed))
        self._arrived()  # demand: authenticated, admitted, well-formed work only
        response = await self._admitted(
            parsed, request, handler, ticket, arrived, trace, chosen[1] if chosen else None
        )
        if response.status_code == HTTPStatus.SERVICE_UNAVAILABLE:
            self.admission.refuse(Reason.POOL_QUEUE_FULL, "a pool's queue is full")
        return response

    async def _admitted(
        self,
        parsed: Any,
        request: Request,
        handler: Handler,
        ticket: Ticket,
        arrived: float,
        trace: RequestSpan | None = None,
        priority: PriorityClass | None = None,
    ) -> Response:
        scope = RequestScope(
            on_first_token=ticket.first_token,
            arrived=arrived,
            session_id=request.headers.get("x-session-id", "")[:256] or None,
            trace=trace,
            priority=priority.priority if priority is not None else None,
        )
        REQUEST_SCOPE.set(scope)
        streaming = False
        try:
            result = await handler(parsed, request)
            if not isinstance(result, AsyncGenerator):
                from vllm.entrypoints.serve.engine.protocol import ErrorResponse

                if isinstance(result, ErrorResponse) or not scope.timings:
                    return self._json_result(result)
                body = result.model_dump()
                body["splitserve"] = splitserve_field(scope.timings, self.config.report_internals)
                return JSONResponse(body)
            # Hold the response until the first event, so a request that fails before any
            # token (a bad prefill, a dead pool, a missed deadline) is a plain HTTP error.
            try:
                first = await anext(result)
            except StopAsyncIteration:
                first = SSE_DONE
            failed = error_event(first)
            if failed is not None:
                await result.aclose()
                status = int(failed["error"].get("code") or 500)
                return self._error(generic_body(failed, status), status)
            streaming = True
            events = with_report(
                first, result, scope.timings, ticket.done, self.config.report_internals
            )
            return StreamingResponse(events, media_type="text/event-stream")
        except Exception as exc:
            return self._vllm_error(exc)
        finally:
            if not streaming:
                ticket.done()

    def _error(self, body: dict[str, Any], status: int) -> JSONResponse:
        """An error answer; a 503 tells when to retry: the measured drain time."""
        retry = self.admission.retry_after() if status == HTTPStatus.SERVICE_UNAVAILABLE else 0
        return error_json(body, status, retry)

    def _arrived(self) -> None:
        if self.on_arrival is not None:
            try:
                self.on_arrival()
            except Exception:  # metrics must never fail a request
                logger.exception("counting an arrival failed")

    def _json_result(self, result: Any) -> JSONResponse:
        from vllm.entrypoints.serve.engine.protocol import ErrorResponse

        if isinstance(result, ErrorResponse):
            return self._error(result.model_dump(), result.error.code)
        return JSONResponse(result.model_dump())

    def _vllm_error(self, exc: Exception) -> JSONResponse:
        """An exception from vLLM's layer as the status and body vLLM's server would send."""
        from vllm.entrypoints.serve.exception_handling.error_response import (
            create_error_response,
        )

        error = create_error_response(exc)
        return self._error(
            generic_body(error.model_dump(), error.error.code, exc), error.error.code
        )

    async def _parse(self, request: Request, model: TypeAdapter[Any]) -> Any:
        body = await read_json(request, self.config.max_body_bytes, self.config.body_timeout_s)
        check_body(body, self.config.max_samples)
        return validate(model, body)

    def _authorize(self, request: Request) -> None:
        if not self.api_keys:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        sent = token.strip().encode()
        # Every key is compared, so the time taken does not say which one came close.
        matches = [hmac.compare_digest(sent, key.encode()) for key in self.api_keys]
        if scheme.lower() != "bearer" or not any(matches):
            raise APIError(
                "missing or incorrect API key: send `Authorization: Bearer <key>`",
                HTTPStatus.UNAUTHORIZED,
            )
