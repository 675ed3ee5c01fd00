"""vLLM's OpenAI layer: `openai:`."""

from __future__ import annotations

from pydantic import Field, model_validator

from app.config.base import Strict


class OpenAIConfig(Strict):
    """The OpenAI front end (vLLM's serving classes), set as vLLM's server flags set it."""

    chat_template: str | None = Field(
        None,
        description="A Jinja chat template, or a path to one, replacing the model's own "
        "(vLLM `--chat-template`).",
    )
    response_role: str = Field(
        "assistant", min_length=1, description="Role of generated chat messages."
    )
    enable_auto_tool_choice: bool = Field(
        False,
        description="Let the model choose to call tools (`tool_choice: auto`); needs "
        "`tool_call_parser` (vLLM `--enable-auto-tool-choice`).",
    )
    tool_call_parser: str | None = Field(
        None,
        min_length=1,
        description="vLLM's parser that reads tool calls out of the model's text, e.g. "
        "`hermes`, `llama3_json`, `mistral` (vLLM `--tool-call-parser`).",
    )
    reasoning_parser: str | None = Field(
        None,
        min_length=1,
        description="vLLM's parser that splits reasoning from the answer, e.g. "
        "`deepseek_r1`, `qwen3` (vLLM `--reasoning-parser`); the engines use it too.",
    )
    enable_force_include_usage: bool = Field(
        False, description="Send usage in every stream, asked for or not."
    )
    enable_prompt_tokens_details: bool = Field(
        False,
        description="Report `usage.prompt_tokens_details.cached_tokens` (vLLM "
        "`--enable-prompt-tokens-details`, off by default there too: on a shared server "
        "it tells a client whether another's prompt shares its prefix).",
    )
    return_tokens_as_token_ids: bool = Field(
        False, description="Logprob tokens as `token_id:N` instead of text."
    )

    @model_validator(mode="after")
    def _auto_tools_need_a_parser(self) -> OpenAIConfig:
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("enable_auto_tool_choice needs tool_call_parser")
        return self
