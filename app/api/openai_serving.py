"""vLLM's own OpenAI serving classes, built over a :class:`PoolEngineClient`.

These are the objects vLLM's API server builds (``init_app_state``), with the settings
of the YAML's ``openai:`` block in place of its command-line flags. They do all the
OpenAI work; :mod:`app.api.http_api` only routes requests to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.api.engine_client import PoolEngineClient
from app.config import AppConfig


@dataclass(frozen=True)
class OpenAIServing:
    """The serving objects behind each route."""

    models: Any  # OpenAIServingModels
    completion: Any  # OpenAIServingCompletion
    chat: Any  # OpenAIServingChat
    tokenization: Any  # ServingTokenization
    engine_client: PoolEngineClient


def build_serving(
    engine_client: PoolEngineClient, config: AppConfig, model_path: str
) -> OpenAIServing:
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm.entrypoints.openai.models.protocol import BaseModelPath
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.entrypoints.serve.tokenize.serving import ServingTokenization
    from vllm.renderers.chat_utils import load_chat_template
    from vllm.renderers.online_renderer import OnlineRenderer

    api = config.openai
    template = load_chat_template(api.chat_template)
    models = OpenAIServingModels(
        engine_client=engine_client,  # type: ignore[arg-type]
        base_model_paths=[BaseModelPath(name=config.model.name, model_path=model_path)],
    )
    template_options: dict[str, Any] = {
        "chat_template": template,
        "chat_template_content_format": "auto",
    }
    tool_options: dict[str, Any] = {
        "enable_auto_tools": api.enable_auto_tool_choice,
        "tool_parser": api.tool_call_parser,
        "reasoning_parser": api.reasoning_parser or "",
    }
    renderer = OnlineRenderer(
        model_config=engine_client.model_config,
        renderer=engine_client.renderer,
        request_logger=None,
        **template_options,
        **tool_options,
    )
    renderer.warmup()
    usage_options: dict[str, Any] = {
        "return_tokens_as_token_ids": api.return_tokens_as_token_ids,
        # usage.prompt_tokens_details.cached_tokens: the prefix-cache hits of the engine
        # that computed the prompt
        "enable_prompt_tokens_details": api.enable_prompt_tokens_details,
        "enable_force_include_usage": api.enable_force_include_usage,
    }
    completion = OpenAIServingCompletion(
        engine_client,  # type: ignore[arg-type]
        models,
        online_renderer=renderer,
        request_logger=None,
        **usage_options,
    )
    chat = OpenAIServingChat(
        engine_client=engine_client,  # type: ignore[arg-type]
        models=models,
        response_role=api.response_role,
        online_renderer=renderer,
        request_logger=None,
        **template_options,
        **tool_options,
        **usage_options,
    )
    tokenization = ServingTokenization(models, renderer, request_logger=None, **template_options)
    return OpenAIServing(models, completion, chat, tokenization, engine_client)
