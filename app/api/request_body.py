"""What a request body may be: read within its limits, checked, validated by vLLM's model.

Every failure is an :class:`~app.api.errors.APIError` with a 4xx status and a message
that names what is wrong (the HTTP layer gives the admission slot back on any of them):
a non-JSON content type (415), a body over ``ingress.max_body_bytes`` (413) or slower
than ``ingress.body_timeout_s`` (408), and a 400 for the rest: invalid UTF-8 or JSON of
any shape (a lone surrogate escape included), a field that steers KV transfer, a refused
feature, more samples than ``ingress.max_samples``, a field vLLM's request model refuses
or trips over.
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request

from app.api.errors import APIError, bad_request

# Fields that would let a client steer KV transfer (read another request's KV blocks),
# so only the server may set them.
KV_STEERING_FIELDS = ("kv_transfer_params", "ec_transfer_params", "vllm_xargs")
# vLLM serves these through paths that would run one engine request per step (beam
# search) or feed the engine tensors (embeddings); a disaggregated request cannot.
REFUSED = {
    "use_beam_search": "beam search is not served: each beam step would be a new request",
    "prompt_embeds": "prompt embeddings are not served: send text or token ids",
}


async def read_json(request: Request, limit: int, timeout_s: float) -> Any:
    """The request's body (at most ``limit`` bytes, within ``timeout_s``), parsed as JSON."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise APIError(
            f"Content-Type must be application/json, got {content_type or 'nothing'!r}",
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise _too_large(limit)
    except TimeoutError as exc:
        raise APIError(
            f"the request body did not arrive within {timeout_s:g} s (ingress.body_timeout_s)",
            HTTPStatus.REQUEST_TIMEOUT,
        ) from exc
    except ClientDisconnect as exc:  # nobody reads the answer; the slot goes back
        raise bad_request("the client left before sending the whole body") from exc
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"request body is not valid UTF-8: {exc.reason}") from exc
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise bad_request("request body is not valid JSON: nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    if "\\ud" in text or "\\uD" in text:  # a \uD800-\uDFFF escape (a pair is one character)
        try:
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise bad_request("request body has a lone UTF-16 surrogate escape") from exc
    return body


def check_body(body: Any, max_samples: int) -> None:
    """What splitserve refuses before vLLM's model sees the body."""
    if not isinstance(body, dict):
        raise bad_request(f"request body must be a JSON object, not {type(body).__name__}")
    for name in KV_STEERING_FIELDS:
        if body.get(name) is not None:
            raise bad_request(f"{name} is set by the server and may not be sent by clients", name)
    for name, reason in REFUSED.items():
        if body.get(name):
            raise bad_request(reason, name)
    asked = _prompt_count(body.get("prompt")) * _count(body.get("n"))
    if asked > max_samples:
        raise bad_request(
            f"the request asks for {asked} samples (prompts times n), over the "
            f"server's limit of {max_samples} (ingress.max_samples)",
            "n",
        )


def validate(model: TypeAdapter[Any], body: dict[str, Any]) -> Any:
    from vllm.exceptions import VLLMClientError

    try:
        return model.validate_python(body)
    except VLLMClientError as exc:
        param = getattr(exc, "parameter", None)
        raise bad_request(f"invalid request: {exc.args[0] if exc.args else exc}", param) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = first.get("msg", "invalid value")
        detail = f"{where}: {message}" if where else message
        raise bad_request(f"invalid request: {detail}", where or None) from exc
    except ValueError as exc:
        raise bad_request(f"invalid request: {exc}") from exc
    except (TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        # vLLM's "before" validators read the raw body and raise these on fields of the
        # wrong shape (``{"messages": null}``); pydantic passes them on unwrapped.
        raise bad_request(f"invalid request: a field has the wrong shape ({exc!r})") from exc


def samples(parsed: Any) -> int:
    """Engine requests a validated request makes: prompts times ``n``."""
    return _prompt_count(getattr(parsed, "prompt", None)) * _count(getattr(parsed, "n", 1))


def _count(n: Any) -> int:
    """``n`` as the sample count vLLM's validation will take (1 when unset)."""
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def _prompt_count(prompt: Any) -> int:
    """How many prompts a completion's ``prompt`` holds (a chat has one): a string or a
    list of token ids is one, a list of strings or of id lists one each."""
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt)
    return 1


def _too_large(limit: int) -> APIError:
    return APIError(
        f"request body is larger than the limit of {limit} bytes",
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    )
