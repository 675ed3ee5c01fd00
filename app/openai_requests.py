"""Parses and validates OpenAI requests into tokenized :class:`ParsedRequest` records.

vLLM's own protocol models (``CompletionRequest``, ``ChatCompletionRequest``) do the
schema work and build the ``SamplingParams``; this module adds what a disaggregated
server must refuse (client-steered KV transfer, batched prompts, features this mode does
not serve) and tokenizes once, so both pools see exactly the same token ids.
"""

from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

from pydantic import ValidationError

from app.errors import APIError, bad_request

# Fields that would let a client steer KV transfer (read another request's KV blocks),
# so only the server may set them.
_KV_STEERING_FIELDS = ("kv_transfer_params", "ec_transfer_params", "vllm_xargs")

# Features this server does not serve yet; each is refused by name rather than ignored.
_UNSUPPORTED_COMPLETION = {
    "echo": "echo",
    "suffix": "suffix",
    "logprobs": "logprobs",
    "prompt_logprobs": "prompt_logprobs",
    "prompt_embeds": "prompt_embeds",
    "use_beam_search": "beam search",
    "best_of": "best_of",
}
_UNSUPPORTED_CHAT = {
    "logprobs": "logprobs",
    "prompt_logprobs": "prompt_logprobs",
    "tools": "tool calling",
    "use_beam_search": "beam search",
    "best_of": "best_of",
    "chat_template": "a per-request chat_template",
}


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request: what the orchestrator needs to serve it."""

    kind: Literal["completion", "chat"]
    request_id: str
    model: str
    prompt_token_ids: list[int]
    sampling_params: Any  # vllm.SamplingParams
    stream: bool
    include_usage: bool


class RequestParser:
    """Validates requests for one served model; ``tokenizer`` is a HF tokenizer."""

    def __init__(self, tokenizer: Any, model_name: str, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.vocab_size = len(tokenizer)

    def parse_completion(self, body: Any) -> ParsedRequest:
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest

        body = self._check_body(body, _UNSUPPORTED_COMPLETION)
        _reject_unknown_fields(CompletionRequest, body)
        request = _validate(CompletionRequest, body)
        self._check_common(request)
        prompt_ids = self._completion_prompt(request.prompt, request.add_special_tokens)
        return self._finish("completion", "cmpl", request, prompt_ids, request.max_tokens)

    def parse_chat(self, body: Any) -> ParsedRequest:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        body = self._check_body(body, _UNSUPPORTED_CHAT)
        _reject_unknown_fields(ChatCompletionRequest, body)
        request = _validate(ChatCompletionRequest, body)
        self._check_common(request)
        if not request.messages:
            raise bad_request("messages must hold at least one message", "messages")
        messages = [_plain_message(i, m) for i, m in enumerate(request.messages)]
        try:
            rendered = self.tokenizer.apply_chat_template(
                messages,
                add_generation_prompt=request.add_generation_prompt,
                continue_final_message=request.continue_final_message,
                tokenize=False,
                **(request.chat_template_kwargs or {}),
            )
        except Exception as exc:  # a template error is the messages' fault
            raise bad_request(f"messages could not be rendered: {exc}", "messages") from exc
        # The template already holds the special tokens it wants (BOS and the like).
        prompt_ids = list(self.tokenizer.encode(rendered, add_special_tokens=False))
        max_tokens = request.max_completion_tokens
        if max_tokens is None:
            with warnings.catch_warnings():  # the legacy field is still what most clients send
                warnings.simplefilter("ignore", DeprecationWarning)
                max_tokens = request.max_tokens
        return self._finish("chat", "chatcmpl", request, prompt_ids, max_tokens)

    def _check_body(self, body: Any, unsupported: dict[str, str]) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request(f"request body must be a JSON object, not {type(body).__name__}")
        for name in _KV_STEERING_FIELDS:
            if body.get(name) is not None:
                raise bad_request(
                    f"{name} is set by the server and may not be sent by clients", name
                )
        for name, feature in unsupported.items():
            if _requested(name, body.get(name)):
                raise bad_request(f"{feature} is not supported by this server", name)
        return body

    def _check_common(self, request: Any) -> None:
        if request.model is not None and request.model != self.model_name:
            raise APIError(
                f"The model `{request.model}` does not exist; this server serves "
                f"`{self.model_name}`.",
                HTTPStatus.NOT_FOUND,
                param="model",
                error_type="NotFoundError",
            )
        if (request.n or 1) != 1:
            raise bad_request("n must be 1: one completion per request is supported", "n")

    def _completion_prompt(self, prompt: Any, add_special_tokens: bool) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one is a single prompt
        if prompt is None:
            raise bad_request("prompt is required", "prompt")
        if isinstance(prompt, str):
            if not prompt:
                raise bad_request("prompt must not be empty", "prompt")
            return list(self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens))
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            if not prompt:
                raise bad_request("prompt must not be empty", "prompt")
            bad = [t for t in prompt if t >= self.vocab_size]
            if bad:
                raise bad_request(
                    f"prompt token id {bad[0]} is out of range (vocab size {self.vocab_size})",
                    "prompt",
                )
            return list(prompt)
        raise bad_request(
            "batched prompts are not supported; send one prompt per request", "prompt"
        )

    def _finish(
        self,
        kind: Literal["completion", "chat"],
        id_prefix: str,
        request: Any,
        prompt_ids: list[int],
        max_tokens: int | None,
    ) -> ParsedRequest:
        prompt_len = len(prompt_ids)
        if prompt_len >= self.max_model_len:
            raise bad_request(
                f"This model's maximum context length is {self.max_model_len} tokens; the "
                f"prompt has {prompt_len} tokens, leaving no room to generate.",
                "messages" if kind == "chat" else "prompt",
            )
        room = self.max_model_len - prompt_len
        if max_tokens is None:
            max_tokens = room
        if max_tokens <= 0:
            raise bad_request(f"max_tokens must be at least 1, got {max_tokens}", "max_tokens")
        if max_tokens > room:
            raise bad_request(
                f"This model's maximum context length is {self.max_model_len} tokens; the "
                f"prompt has {prompt_len} tokens and max_tokens is {max_tokens} "
                f"({prompt_len + max_tokens} in all).",
                "max_tokens",
            )
        from vllm.exceptions import VLLMClientError

        try:
            params = request.to_sampling_params(max_tokens, {})
        except (ValueError, TypeError, VLLMClientError) as exc:
            raise _client_error(exc) from exc
        options = request.stream_options
        return ParsedRequest(
            kind=kind,
            request_id=f"{id_prefix}-{uuid.uuid4().hex}",
            model=self.model_name,
            prompt_token_ids=prompt_ids,
            sampling_params=params,
            stream=bool(request.stream),
            include_usage=bool(options and options.include_usage),
        )


def _reject_unknown_fields(model: Any, body: dict[str, Any]) -> None:
    """Refuse fields neither OpenAI nor vLLM defines, as OpenAI does (vLLM ignores them)."""
    known = set(model.model_fields)
    known.update(f.alias for f in model.model_fields.values() if f.alias)
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad_request(f"unrecognized request argument: {unknown[0]}", unknown[0])


def _requested(name: str, value: Any) -> bool:
    """Whether a feature field asks for something (its default values do not)."""
    if value is None or value is False or value == "":
        return False
    return not (name == "best_of" and value == 1)


def _client_error(exc: Exception) -> APIError:
    """A 400 for an error vLLM's validation raised, naming the field it names."""
    param = getattr(exc, "parameter", None)
    message = str(exc.args[0]) if exc.args else str(exc)
    return bad_request(f"invalid request: {message}", param)


def _validate(model: Any, body: dict[str, Any]) -> Any:
    from vllm.exceptions import VLLMClientError

    try:
        return model.model_validate(body)
    except VLLMClientError as exc:
        raise _client_error(exc) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = first.get("msg", "invalid value")
        detail = f"{where}: {message}" if where else message
        raise bad_request(f"invalid request: {detail}", where or None) from exc
    except ValueError as exc:
        raise bad_request(f"invalid request: {exc}") from exc


def _plain_message(index: int, message: Any) -> dict[str, str]:
    """A chat message as ``{"role", "content"}`` with text content only."""
    if not isinstance(message, dict):
        message = dict(message)
    role = message.get("role")
    content = message.get("content")
    if not isinstance(role, str):
        raise bad_request(f"messages[{index}].role must be a string", f"messages.{index}.role")
    if content is None:
        content = ""
    if isinstance(content, list):
        texts = []
        for part in content:
            part = part if isinstance(part, dict) else dict(part)
            if part.get("type") != "text":
                raise bad_request(
                    f"messages[{index}] has a {part.get('type')!r} part; only text is supported",
                    f"messages.{index}.content",
                )
            texts.append(str(part.get("text", "")))
        content = "".join(texts)
    if not isinstance(content, str):
        raise bad_request(
            f"messages[{index}].content must be a string or text parts",
            f"messages.{index}.content",
        )
    return {"role": role, "content": content}
