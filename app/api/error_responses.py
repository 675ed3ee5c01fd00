"""The HTTP error answers: an :class:`~app.api.errors.APIError` as JSON, a body fit for any
client (a server failure's details go to the log, not to the client), and the
``Retry-After`` of an overload."""

from __future__ import annotations

import logging
import secrets
from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse

from app.api.errors import APIError

logger = logging.getLogger("splitserve.http")


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


def incident_id() -> str:
    """A short id that ties an error's generic body to its details in the log."""
    return secrets.token_hex(6)


def generic_body(
    body: dict[str, Any], status: int, exc: BaseException | None = None
) -> dict[str, Any]:
    """An error body fit for any client: a 5xx other than an overload (503) or a missed
    deadline (504) says only that the server failed, with an id; what failed (internal
    addresses, replica and engine names, remote errors) goes to the log under that id."""
    if status < HTTPStatus.INTERNAL_SERVER_ERROR or status in (
        HTTPStatus.SERVICE_UNAVAILABLE,
        HTTPStatus.GATEWAY_TIMEOUT,
    ):
        return body
    incident = incident_id()
    error = body.get("error") or {}
    logger.error("request failed [%s]: %s", incident, error.get("message"), exc_info=exc)
    message = f"the server failed to answer; its log has the details under [{incident}]"
    return APIError(message, status).body()


def error_json(body: dict[str, Any], status: int, retry_after_s: int) -> JSONResponse:
    """An error body; a 503 (overload) tells the client when to retry."""
    headers = (
        {"Retry-After": str(retry_after_s)} if status == HTTPStatus.SERVICE_UNAVAILABLE else None
    )
    return JSONResponse(body, status_code=status, headers=headers)
