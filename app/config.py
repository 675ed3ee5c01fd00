"""The user-facing configuration: what a YAML file's ``args:`` block may say.

Every model is strict (``extra="forbid"``): an unknown key or a bad value fails when the
application is built, and pydantic's message names the field. Internal runtime records
live in :mod:`app.records`, not here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.cpu_affinity import CORE_LIST


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mode(StrEnum):
    DISAGGREGATED = "disaggregated"
    COLOCATED = "colocated"


class ModelConfig(_Strict):
    """Which model the engines load and how vLLM runs it."""

    source: str = Field(
        "builtin:tiny-llama",
        description="`builtin:tiny-llama` (generated locally), a local HF model folder, "
        "or a hub id.",
        min_length=1,
    )
    served_name: str | None = Field(
        None,
        description="Name clients put in `model`; defaults to the builtin name or `source`.",
    )
    max_model_len: int = Field(2048, gt=0, description="Longest prompt + output, in tokens.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="Weight and activation dtype (vLLM `dtype`)."
    )
    enforce_eager: bool = Field(True, description="Skip graph capture / compilation.")
    block_size: int | None = Field(
        None, gt=0, description="KV block size in tokens; None keeps vLLM's platform default."
    )
    enable_prefix_caching: bool = Field(True, description="vLLM automatic prefix caching.")
    kv_cache_gib: int = Field(
        1, gt=0, description="CPU hosts: KV cache size per engine (VLLM_CPU_KVCACHE_SPACE)."
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="GPU hosts: share of GPU memory vLLM may use."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="Tensor parallel degree per engine.")
    seed: int = Field(0, description="Engine seed (sampling with temperature > 0).")
    max_num_seqs: int = Field(64, gt=0, description="Most sequences in one engine batch.")
    executor: Literal["auto", "uni", "mp"] = Field(
        "auto",
        description="Where the model runs: `uni` inside vLLM's engine-core process, `mp` in "
        "worker processes of their own. `auto` picks `uni` when tensor_parallel_size is 1 "
        "(vLLM's CPU platform would otherwise add a worker process per engine), else "
        "vLLM's own choice.",
    )

    structured_outputs_backend: Literal[
        "auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"
    ] = Field(
        "auto",
        description="The engines' structured-output backend (vLLM "
        "`structured_outputs_config.backend`), used by `response_format`, "
        "`structured_outputs` and tool calls that name a function or are required.",
    )

    @model_validator(mode="after")
    def _executor_fits_parallelism(self) -> ModelConfig:
        if self.executor == "uni" and self.tensor_parallel_size > 1:
            raise ValueError(
                "model.executor 'uni' runs one worker; tensor_parallel_size "
                f"{self.tensor_parallel_size} needs 'mp' (or 'auto')"
            )
        return self

    @property
    def executor_backend(self) -> Literal["uni", "mp"] | None:
        """The vLLM executor the engines are set to; None keeps vLLM's own choice (``auto``
        with tensor parallelism: ``mp``, or ``ray`` inside a Ray placement group)."""
        if self.executor != "auto":
            return self.executor
        return "uni" if self.tensor_parallel_size == 1 else None

    @property
    def name(self) -> str:
        if self.served_name:
            return self.served_name
        return self.source.removeprefix("builtin:")


class TransportConfig(_Strict):
    """How KV moves from the prefill pool to the decode pool."""

    kind: Literal["auto", "nixl", "object_store"] = Field(
        "auto",
        description="`nixl` (UCX/RDMA), `object_store` (Ray object store), or `auto`: NIXL "
        "first, the object store when NIXL is missing or fails, local recompute last. "
        "Every kind ends in recompute, so a failed transfer never fails a request.",
    )
    kv_buffer_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where NIXL registers the KV buffers: `cpu` (host memory), `cuda`, or "
        "`auto` (cuda when the engine runs on a GPU, else cpu).",
    )
    side_channel_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Address each engine's NIXL handshake listener binds and advertises. "
        "`auto`: the address of the Ray node the replica runs on (what pools spread over "
        "several machines need); `127.0.0.1` keeps a single machine's traffic on loopback.",
    )
    ucx_tls: str | None = Field(
        None,
        pattern=r"^\^?[a-z0-9_,]+$",
        description="UCX transports NIXL may use (UCX_TLS), e.g. `tcp` to force the network "
        "path between hosts, `rc,ud,sm,self` on RDMA fabrics; None lets UCX choose.",
    )
    prefill_queue_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest wait for a prefill replica to start a request's prefill "
        "(Serve's queue: every replica busy, or none alive); then decode prefills it.",
    )
    prefill_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a prefill may run once its replica started it; then the "
        "next transport is tried.",
    )
    transfer_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest wait for decode's first token when it must pull KV, counted "
        "from when the decode replica started the request (a hung transfer); then the "
        "next transport is tried. Time in the decode pool's queue does not count, and "
        "recompute has no such limit.",
    )
    kv_lease_s: int = Field(
        30,
        ge=6,
        description="Lease on the KV blocks prefill holds for decode: freed when decode "
        "confirms the pull, or when the lease runs out (decode renews it while it waits).",
    )
    nixl_progress_thread: bool = Field(
        True,
        description="Run NIXL's progress thread, which drives UCX in the background. "
        "Transports whose target side must act need it (a READ over TCP is served by the "
        "prefill engine's UCX worker): without it such a READ completes only while the "
        "prefill engine steps, and can stall for good once it idles.",
    )
    nixl_progress_poll_ms: int = Field(
        5,
        ge=0,
        le=1000,
        description="Longest pause of NIXL's progress thread between polls; it wakes at "
        "once when UCX has network events. 0 keeps NIXL's own setting, polling without "
        "pause, which keeps one core busy per engine even when idle.",
    )


class AutoscalingConfig(_Strict):
    """Ray Serve autoscaling for one pool (same field names as Serve's)."""

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    initial_replicas: int | None = Field(None, ge=0)
    target_ongoing_requests: float = Field(2.0, gt=0)
    upscale_delay_s: float = Field(30.0, ge=0)
    downscale_delay_s: float = Field(600.0, ge=0)
    look_back_period_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must be <= max_replicas")
        return self


class RayActorOptions(_Strict):
    """The subset of Ray Serve's `ray_actor_options` a pool may set."""

    num_cpus: float = Field(1.0, ge=0, description="Logical CPUs reserved per replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per replica.")
    memory: int | None = Field(None, ge=0, description="Bytes of memory reserved per replica.")
    resources: dict[str, float] = Field(
        default_factory=dict, description="Custom resources (e.g. to pin a pool to nodes)."
    )


class DeploymentOptions(_Strict):
    """Ray Serve deployment options shared by every pool and the ingress."""

    num_replicas: int | None = Field(
        None, ge=1, description="Fixed replica count; leave unset when autoscaling."
    )
    autoscaling_config: AutoscalingConfig | None = Field(
        None, description="Serve autoscaling; mutually exclusive with num_replicas."
    )
    max_ongoing_requests: int = Field(64, gt=0, description="Concurrent requests per replica.")
    max_queued_requests: int = Field(
        -1,
        ge=-1,
        description="Requests Serve may queue for this deployment beyond those ongoing; "
        "more are refused (503). -1: no bound.",
    )
    ray_actor_options: RayActorOptions = Field(default_factory=RayActorOptions)

    @model_validator(mode="after")
    def _one_scaling_mode(self) -> DeploymentOptions:
        if self.num_replicas is not None and self.autoscaling_config is not None:
            raise ValueError("set either num_replicas or autoscaling_config, not both")
        return self

    def to_serve_options(self) -> dict[str, Any]:
        """The keyword arguments for `serve.deployment(...).options(...)`."""
        options: dict[str, Any] = {
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "ray_actor_options": self.ray_actor_options.model_dump(exclude_none=True),
        }
        if self.autoscaling_config is not None:
            options["autoscaling_config"] = self.autoscaling_config.model_dump(exclude_none=True)
        else:
            options["num_replicas"] = self.num_replicas or 1
        return options


class PoolConfig(DeploymentOptions):
    """One pool of vLLM engines (prefill, decode, or the colocated pool)."""

    max_queued_requests: int = Field(
        128,
        ge=-1,
        description="Requests Serve may queue for the pool beyond those ongoing. A full "
        "prefill queue sends the request to be prefilled on decode; a full decode queue "
        "is a 503 for the client. -1: no bound.",
    )

    cpu_binding: str | None = Field(
        None,
        description="CPU hosts: cores the engine's OpenMP threads bind to "
        "(VLLM_CPU_OMP_THREADS_BIND), e.g. `0`, `1`, `0-3`; None lets vLLM choose.",
        pattern=r"^(all|nobind|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)$",
    )
    stream_interval_ms: float = Field(
        50.0,
        ge=0,
        le=1000,
        description="Decode and colocated pools: the longest a stream waits between "
        "chunks; tokens made meanwhile travel together as one chunk (the first token is "
        "never held). 0 sends every engine step.",
    )
    stream_messages_per_s: float = Field(
        200.0,
        ge=0,
        description="Decode and colocated pools: chunk budget per replica. Each stream's "
        "interval is (streams running on the replica) / budget, at most "
        "`stream_interval_ms`: one stream gets a chunk every 5 ms, 10 or more streams every "
        "50 ms. Every chunk costs CPU in three processes (replica, ingress, proxy). "
        "0 always uses `stream_interval_ms`.",
    )


class AdmissionConfig(_Strict):
    """Load shedding at the ingress: refuse at once (503 + Retry-After) what would wait
    longer than the budget for its first token (docs/reliability.md, "Overload")."""

    ttft_budget_s: float = Field(
        5.0,
        gt=0,
        description="The first-token wait admitted requests should meet. A new request is "
        "refused while the oldest request waiting for a first token has waited longer "
        "than `headroom` times it.",
    )
    headroom: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Admit while the oldest wait is under this share of the budget, "
        "leaving room for requests that wait longer than the oldest one did.",
    )
    max_waiting: int = Field(
        128,
        gt=0,
        description="Most requests one ingress replica admits while they wait for a first "
        "token, whatever the estimate.",
    )
    retry_after_s: int = Field(1, ge=0, description="The Retry-After header of a 503.")


class IngressConfig(DeploymentOptions):
    """The HTTP front door."""

    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)

    max_ongoing_requests: int = Field(256, gt=0)
    ray_actor_options: RayActorOptions = Field(
        default_factory=lambda: RayActorOptions(num_cpus=0.0)
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="Deadline for a whole request, prefill to last token."
    )
    max_body_bytes: int = Field(1 << 20, gt=0, description="Largest request body accepted.")
    cpu_affinity: str | None = Field(
        None,
        pattern=CORE_LIST,
        description="Cores the ingress replica's process is bound to, e.g. `4-7`, to keep "
        "the HTTP front end off the engines' cores on a machine with cores to spare. None "
        "leaves it to the OS, which measured better on 2 cores (docs/performance.md).",
    )
    api_key: str | None = Field(
        None,
        min_length=1,
        description="Require `Authorization: Bearer <key>` on /v1/*. The environment "
        "variable SPLITSERVE_API_KEY, when set in the ingress replica, overrides it. "
        "/health stays open.",
    )


class OpenAIConfig(_Strict):
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
    return_tokens_as_token_ids: bool = Field(
        False, description="Logprob tokens as `token_id:N` instead of text."
    )

    @model_validator(mode="after")
    def _auto_tools_need_a_parser(self) -> OpenAIConfig:
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("enable_auto_tool_choice needs tool_call_parser")
        return self


class RouterConfig(_Strict):
    """How requests are spread over replicas, and when to disaggregate at all."""

    prefill_policy: Literal["prefix_affinity", "serve_default"] = Field(
        "prefix_affinity",
        description="Prefill pool (colocated: the only pool): `prefix_affinity` sends prompts "
        "sharing a prefix to the same replica; `serve_default` is Serve's power-of-two choice.",
    )
    decode_policy: Literal["kv_capacity", "serve_default"] = Field(
        "kv_capacity",
        description="Decode pool: `kv_capacity` prefers the replica with the most free KV cache.",
    )
    prefix_block_tokens: int = Field(64, gt=0, description="Prefix hashing granularity, tokens.")
    max_imbalance: int = Field(
        4, ge=0, description="Queue-length gap beyond which load beats prefix affinity."
    )
    local_prefill_below_tokens: int = Field(
        512,
        ge=0,
        description="Prompts shorter than this are prefilled on the decode replica (no "
        "transfer); 0 disaggregates every request.",
    )
    max_prefill_backlog: int = Field(
        16,
        gt=0,
        description="Prefills in flight from one ingress beyond which new requests are "
        "prefilled on decode instead of waiting.",
    )


class RequestPathConfig(_Strict):
    """How calls travel between the app's replicas (Ray Serve settings; docs/performance.md)."""

    grpc: bool = Field(
        True,
        description="Send the ingress's calls to the pools by value over Serve's gRPC "
        "channel instead of as Ray actor calls. Calls that carry an object-store KV "
        "reference always go as Ray calls, which keep the reference alive.",
    )
    replica_event_loop: bool = Field(
        True,
        description="Run each replica's code, and the ingress's routers, on Serve's own "
        "event loop instead of a separate thread and loop "
        "(RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD=0, "
        "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0): fewer thread handoffs per call and per "
        "streamed chunk.",
    )

    def replica_env(self) -> dict[str, str]:
        """Environment variables every replica of the app starts with."""
        if not self.replica_event_loop:
            return {}
        return {
            "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
            "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
        }


class MigrationConfig(_Strict):
    """Moving a stream whose decode replica died to another replica (docs/reliability.md)."""

    enabled: bool = Field(
        True,
        description="When a decode replica or its engine dies mid-stream, or its stream "
        "stalls, continue the request on a healthy replica: the prompt plus the tokens "
        "already streamed become the new prompt, and the client sees one stream.",
    )
    max_migrations: int = Field(2, ge=0, description="Most migrations of one request.")
    stall_timeout_s: float = Field(
        60.0,
        gt=0,
        description="A stream that sends nothing for this long after its first token is "
        "taken as lost and migrated.",
    )
    resume_timeout_s: float = Field(
        180.0,
        gt=0,
        description="How long a lost request waits for a live replica to take it (Serve "
        "restarting the only replica, warm-up included); then the client gets the error.",
    )
    retry_interval_s: float = Field(
        1.0, gt=0, description="Pause between sends of a lost request no replica took yet."
    )


class AppConfig(_Strict):
    """The whole application: the YAML's `args:` block."""

    mode: Mode = Field(Mode.DISAGGREGATED, description="`disaggregated` or `colocated`.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    transport: TransportConfig = Field(default_factory=TransportConfig)
    ingress: IngressConfig = Field(default_factory=IngressConfig)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    request_path: RequestPathConfig = Field(default_factory=RequestPathConfig)
    migration: MigrationConfig = Field(default_factory=MigrationConfig)
    prefill: PoolConfig = Field(
        default_factory=lambda: PoolConfig(cpu_binding="0"),
        description="The prefill pool (disaggregated mode).",
    )
    decode: PoolConfig = Field(
        default_factory=lambda: PoolConfig(cpu_binding="1"),
        description="The decode pool; in colocated mode, the only pool.",
    )
