"""The OpenAI HTTP API as a Starlette app: routes, body checks, SSE streaming, errors.

Every client mistake ends in a 4xx OpenAI-shaped error body; a failure inside the
serving path ends in a 5xx body (or, once a stream has started, an SSE error event) and
never in a hung connection: each request runs under its deadline.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.config import IngressConfig
from app.errors import APIError, bad_request, describe_failure, server_error
from app.openai_requests import ParsedRequest, RequestParser
from app.openai_responses import ResponseWriter, stream_error
from app.orchestrator import Orchestrator, RequestTimings
from app.records import GenerateRequest, TokenChunk

logger = logging.getLogger("splitserve.http")


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


class OpenAIServer:
    """Serves one model's OpenAI endpoints through an :class:`Orchestrator`."""

    def __init__(
        self,
        parser: RequestParser,
        orchestrator: Orchestrator,
        config: IngressConfig,
        api_key: str | None = None,
        on_complete: Callable[[RequestTimings], None] | None = None,
    ) -> None:
        self.parser = parser
        self.orchestrator = orchestrator
        self.config = config
        self.api_key = api_key
        self.on_complete = on_complete

    def asgi_app(self) -> Starlette:
        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
        ]
        return Starlette(
            routes=routes,
            exception_handlers={HTTPException: self._http_exception},
        )

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
        return Response(status_code=200)

    def _authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.api_key.encode()
        ):
            raise APIError(
                "missing or incorrect API key: send `Authorization: Bearer <key>`",
                HTTPStatus.UNAUTHORIZED,
            )

    async def models(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except APIError as error:
            return error_response(error)
        card = {
            "id": self.parser.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "splitserve",
            "max_model_len": self.parser.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def completions(self, request: Request) -> Response:
        return await self._serve(request, self.parser.parse_completion)

    async def chat_completions(self, request: Request) -> Response:
        return await self._serve(request, self.parser.parse_chat)

    async def _serve(self, request: Request, parse: Any) -> Response:
        try:
            self._authorize(request)
            parsed: ParsedRequest = parse(await self._json_body(request))
        except APIError as error:
            return error_response(error)
        generate = GenerateRequest(
            request_id=parsed.request_id,
            prompt_token_ids=parsed.prompt_token_ids,
            sampling_params=parsed.sampling_params,
        )
        timings = RequestTimings()
        writer = ResponseWriter(parsed, timings)
        deadline = time.monotonic() + self.config.request_timeout_s
        chunks = self._with_deadline(
            self.orchestrator.run(generate, timings), deadline, parsed.request_id
        )
        if parsed.stream:
            return await self._stream(chunks, writer, timings)
        try:
            async for chunk in chunks:
                writer.add(chunk)
        except APIError as error:
            return error_response(error)
        self._completed(timings)
        return JSONResponse(writer.full_response())

    def _completed(self, timings: RequestTimings) -> None:
        if self.on_complete is not None:
            try:
                self.on_complete(timings)
            except Exception:  # metrics must never fail a request
                logger.exception("recording request metrics failed")

    async def _stream(
        self, chunks: AsyncIterator[TokenChunk], writer: ResponseWriter, timings: RequestTimings
    ) -> Response:
        # Wait for the first chunk before answering, so a failure before any token
        # (a bad prefill, a dead pool) is a plain HTTP error, not a broken stream.
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            first = None
        except APIError as error:
            return error_response(error)

        async def events() -> AsyncIterator[str]:
            try:
                if first is not None:
                    yield writer.stream_events(first)
                async for chunk in chunks:
                    yield writer.stream_events(chunk)
                self._completed(timings)
            except APIError as error:
                yield stream_error(error)
            finally:
                await chunks.aclose()  # type: ignore[attr-defined]
            yield writer.stream_end()

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _with_deadline(
        self, chunks: AsyncIterator[TokenChunk], deadline: float, request_id: str
    ) -> AsyncIterator[TokenChunk]:
        """Re-yield ``chunks``; turn a missed deadline or a pool failure into an APIError."""
        iterator = aiter(chunks)
        try:
            while True:
                remaining = deadline - time.monotonic()
                try:
                    async with asyncio.timeout(max(remaining, 0.0)):
                        chunk = await anext(iterator)
                except StopAsyncIteration:
                    return
                yield chunk
        except TimeoutError as exc:
            raise APIError(
                f"request {request_id} missed its deadline of {self.config.request_timeout_s:g} s",
                HTTPStatus.GATEWAY_TIMEOUT,
                error_type="TimeoutError",
            ) from exc
        except (APIError, asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            logger.exception("request %s failed", request_id)
            raise server_error(f"request {request_id} failed: {describe_failure(exc)}") from exc
        finally:
            await iterator.aclose()  # type: ignore[attr-defined]

    async def _json_body(self, request: Request) -> Any:
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise APIError(
                f"Content-Type must be application/json, got {content_type or 'nothing'!r}",
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            )
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise _too_large(limit)
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad_request(f"request body is not valid UTF-8: {exc.reason}") from exc
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise bad_request(f"request body is not valid JSON: {exc}") from exc


def _too_large(limit: int) -> APIError:
    return APIError(
        f"request body is larger than the limit of {limit} bytes",
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    )
