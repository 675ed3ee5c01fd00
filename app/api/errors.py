"""Errors that reach the client, shaped as OpenAI error bodies.

Anything the client did wrong is an :class:`APIError` with a 4xx status and a message
that says what is wrong and, where it applies, which field (``param``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any


class APIError(Exception):
    """An error with an HTTP status and an OpenAI-shaped body."""

    def __init__(
        self,
        message: str,
        status: int = HTTPStatus.BAD_REQUEST,
        *,
        param: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = int(status)
        self.param = param
        self.error_type = error_type or _default_type(self.status)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }


def _default_type(status: int) -> str:
    if status == HTTPStatus.NOT_FOUND:
        return "NotFoundError"
    if status == HTTPStatus.UNAUTHORIZED:
        return "AuthenticationError"
    if status < 500:
        return "BadRequestError"
    if status == HTTPStatus.SERVICE_UNAVAILABLE:
        return "ServiceUnavailableError"
    return "InternalServerError"


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(message, HTTPStatus.BAD_REQUEST, param=param)


def server_error(message: str) -> APIError:
    return APIError(message, HTTPStatus.INTERNAL_SERVER_ERROR)
