"""The whole application: the YAML's `args:` block."""

from __future__ import annotations

from pydantic import Field, model_validator

from app.config.base import Mode, Strict
from app.config.deployment import IngressConfig, PoolConfig
from app.config.model import ModelConfig
from app.config.openai import OpenAIConfig
from app.config.priority import PriorityConfig
from app.config.routing import MigrationConfig, RequestPathConfig, RouterConfig
from app.config.slo import SloConfig
from app.config.tracing import TracingConfig
from app.config.transport import TransportConfig


class AppConfig(Strict):
    """The whole application: the YAML's `args:` block."""

    mode: Mode = Field(Mode.DISAGGREGATED, description="`disaggregated` or `colocated`.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    transport: TransportConfig = Field(default_factory=TransportConfig)
    ingress: IngressConfig = Field(default_factory=IngressConfig)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    request_path: RequestPathConfig = Field(default_factory=RequestPathConfig)
    migration: MigrationConfig = Field(default_factory=MigrationConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    priority: PriorityConfig = Field(default_factory=PriorityConfig)
    slo: SloConfig = Field(
        default_factory=SloConfig,
        description="TTFT/TPOT targets: the SLO autoscaling policy, goodput, the planner.",
    )
    prefill: PoolConfig = Field(
        default_factory=lambda: PoolConfig(cpu_binding="0"),
        description="The prefill pool (disaggregated mode).",
    )
    decode: PoolConfig = Field(
        default_factory=lambda: PoolConfig(cpu_binding="1"),
        description="The decode pool; in colocated mode, the only pool.",
    )

    def pool_for(self, role: str) -> PoolConfig:
        """The pool whose engines play ``role``: ``prefill``; ``decode`` and ``colocated``
        (whose only pool is `decode`)."""
        return self.prefill if role == "prefill" else self.decode

    @model_validator(mode="after")
    def _step_budgets_fit_the_model(self) -> AppConfig:
        # vLLM refuses these only when the engine starts; name the field here instead.
        for name, pool in (("prefill", self.prefill), ("decode", self.decode)):
            budget = pool.max_num_batched_tokens
            if budget is not None and budget < self.model.max_num_seqs:
                raise ValueError(
                    f"{name}.max_num_batched_tokens ({budget}) must be at least "
                    f"model.max_num_seqs ({self.model.max_num_seqs}): every running "
                    "sequence needs a token of the step"
                )
            if pool.long_prefill_token_threshold > self.model.max_model_len:
                raise ValueError(
                    f"{name}.long_prefill_token_threshold "
                    f"({pool.long_prefill_token_threshold}) is over model.max_model_len "
                    f"({self.model.max_model_len})"
                )
        return self

    @model_validator(mode="after")
    def _kv_events_need_a_prefix_cache(self) -> AppConfig:
        if self.router.prefix_source == "kv_events" and not self.model.enable_prefix_caching:
            raise ValueError(
                "router.prefix_source: kv_events reads the engines' prefix caches, but "
                "model.enable_prefix_caching is false"
            )
        return self
