"""Ray Serve options of the pools and the ingress: `prefill:`, `decode:`, `ingress:`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from app.config.base import Strict
from app.cpu_affinity import CORE_LIST
from app.net import is_loopback


class AutoscalingConfig(Strict):
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


class RayActorOptions(Strict):
    """The subset of Ray Serve's `ray_actor_options` a pool may set."""

    num_cpus: float = Field(1.0, ge=0, description="Logical CPUs reserved per replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per replica.")
    memory: int | None = Field(None, ge=0, description="Bytes of memory reserved per replica.")
    resources: dict[str, float] = Field(
        default_factory=dict, description="Custom resources (e.g. to pin a pool to nodes)."
    )


class DeploymentOptions(Strict):
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
    graceful_shutdown_timeout_s: float | None = Field(
        None,
        ge=0,
        description="How long a stopping replica (a redeploy, a scale-down) keeps serving "
        "its ongoing requests before it is killed. Pools: Serve's 20 s by default; decode "
        "streams still running then move to another replica (`migration:`). Ingress: "
        "`request_timeout_s` by default, so no client stream is cut.",
    )

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
        if self.graceful_shutdown_timeout_s is not None:
            options["graceful_shutdown_timeout_s"] = self.graceful_shutdown_timeout_s
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
        description="CPU hosts: cores the engine runs on, e.g. `0`, `1`, `0-3` (the replica "
        "binds every thread of its engine processes there; vLLM also gets it as "
        "VLLM_CPU_OMP_THREADS_BIND); alternatives such as `0|1`: each replica claims a set "
        "no other replica on the host holds (one engine per core); `all`, `nobind` or None "
        "leave vLLM's choice.",
        pattern=r"^(all|nobind|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*(\|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)*)$",
    )
    cpu_binding_on_gpu: bool = Field(
        False,
        description="Apply `cpu_binding` also where the engine runs on a GPU. By default it "
        "applies only on hosts without one: the shipped configs bind each engine to one "
        "core, which a GPU engine must not be held to (and a container's cpuset may lack).",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        gt=0,
        description="The engine's token budget per step (vLLM `max_num_batched_tokens`): "
        "a longer prompt is prefilled in chunks of at most this many tokens, one per step. "
        "None keeps vLLM's default (on CPU, at least `model.max_model_len`).",
    )
    long_prefill_token_threshold: int = Field(
        0,
        ge=0,
        description="The most tokens of one prompt an engine step takes while other requests "
        "wait or run (vLLM `long_prefill_token_threshold`), so a prompt that arrives behind "
        "a long one joins the next step instead of waiting for the whole long prefill. A "
        "prompt alone in the engine is not capped. 0: no cap.",
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

    @model_validator(mode="after")
    def _cap_within_budget(self) -> PoolConfig:
        budget = self.max_num_batched_tokens
        if budget is not None and self.long_prefill_token_threshold >= budget:
            raise ValueError(
                f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) must be "
                f"under max_num_batched_tokens ({budget}): a step would take no other prompt"
            )
        return self


class AdmissionConfig(Strict):
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
    retry_after_s: int = Field(
        1,
        ge=0,
        description="The Retry-After header of a 503 while the drain rate is not measured "
        "yet (afterwards: the measured time to drain the queue waiting now).",
    )
    predicted_share: float = Field(
        0.35,
        ge=0,
        le=1,
        description="Also refuse a request whose first-token wait, predicted from the queue "
        "it joins and the pools' measured drain rate (first tokens per busy second over the "
        "last few seconds of work), is over this share of `ttft_budget_s`: a typical wait, "
        "where the budget bounds the tail. 0: no prediction (`max_waiting` and the oldest "
        "wait alone).",
    )


class IngressConfig(DeploymentOptions):
    """The HTTP front door."""

    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)

    max_ongoing_requests: int = Field(
        4096,
        gt=0,
        description="Requests one ingress replica holds at once, streams and refusals "
        "alike. Admission bounds what waits for the pools (`admission.max_waiting`); this "
        "only has to let every request reach admission. A replica at this limit makes "
        "Serve's proxy queue further requests where admission cannot see them (measured "
        "at 256: 244 s waits in the proxy, no 503).",
    )
    ray_actor_options: RayActorOptions = Field(
        default_factory=lambda: RayActorOptions(num_cpus=0.0)
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="Deadline for a whole request, prefill to last token."
    )
    max_body_bytes: int = Field(1 << 20, gt=0, description="Largest request body accepted.")
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest a client may take to send its request body; a slower upload "
        "is answered 408 and gives its admission slot back.",
    )
    report_internals: bool = Field(
        False,
        description="Put the server's internals in each response's `splitserve` field: "
        "the routing decision, engine ids, prefix-cache hits, KV bytes and failure text. "
        "Off, the field says only how the request was served (disaggregated, transport, "
        "where the first token came from, TTFT, fallback and migration kinds): on a "
        "server shared by clients who must not learn each other's prompts, cache hits "
        "are an oracle for them. Benchmarks and tests turn it on.",
    )
    metrics_require_api_key: bool = Field(
        False,
        description="Require the API key on `GET /metrics` too. Off by default, as on "
        "vLLM's server (scrapers need no key); the page names no address either way.",
    )
    max_samples: int = Field(
        64,
        gt=0,
        description="Most samples one request may ask for: prompts in the request times "
        "`n`. A request over it is refused with 400 naming this limit (vLLM alone allows "
        "1,024 prompts times n=16,384).",
    )

    def to_serve_options(self) -> dict[str, Any]:
        options = super().to_serve_options()
        # A stopping ingress holds its clients' streams: let them run to their deadline.
        options.setdefault("graceful_shutdown_timeout_s", self.request_timeout_s)
        return options

    cpu_affinity: str | None = Field(
        None,
        pattern=CORE_LIST,
        description="Cores the ingress replica's process is bound to, e.g. `4-7`, to keep "
        "the HTTP front end off the engines' cores on a machine with cores to spare. None "
        "leaves it to the OS, which measured better on 2 cores (docs/performance.md).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="Require `Authorization: Bearer <key>` on /v1/*, at least 16 "
        "characters. A key written here is readable by anyone who can read the app's "
        "config (Ray's dashboard, `serve config`): prefer `api_key_file`, or the "
        "environment variable SPLITSERVE_API_KEY in the ingress replica, which override "
        "it (the environment first). /health stays open. Engine replicas never get it.",
    )
    allow_network_without_key: bool = Field(
        False,
        description="Serve the API on an address other hosts can reach (http_options.host "
        "not loopback) without an API key, where a firewall or an authenticating proxy of "
        "your own guards the port. Off: the ingress refuses to start there without a key.",
    )
    api_key_file: str | None = Field(
        None,
        min_length=1,
        description="A file holding the API key, or several, one a line (any of them is "
        "accepted: rotate a key by adding the new one, then removing the old), read when "
        "the ingress starts; "
        "refused unless only its owner may read it (mode 0600 or 0400), as ssh refuses "
        "a private key others can read.",
    )

    @field_validator("api_key")
    @classmethod
    def _key_long_enough(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None:
            check_key(key.get_secret_value(), "ingress.api_key")
        return key

    def keys(self, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
        """The API keys in force, any of which a request may send: SPLITSERVE_API_KEY's
        (several separated by commas), else ``api_key_file``'s (one a line; blank lines
        and ``#`` comments skipped), else ``api_key``; empty: no key. Several keys let a
        key be rotated without a moment when neither works. Raises ``ValueError`` naming
        what is wrong."""
        if environ.get("SPLITSERVE_API_KEY"):
            found = environ["SPLITSERVE_API_KEY"].split(",")
            return tuple(check_key(key, "SPLITSERVE_API_KEY") for key in found)
        if self.api_key_file is not None:
            return read_key_file(self.api_key_file)
        return () if self.api_key is None else (self.api_key.get_secret_value(),)

    def check_exposure(self, host: str, keys: tuple[str, ...]) -> None:
        """Refuse (``ValueError``, naming the ways out) to serve the API on ``host`` when
        other hosts can reach it and no key (``keys`` empty) guards it, unless
        ``allow_network_without_key`` says something else does."""
        if keys or self.allow_network_without_key or is_loopback(host):
            return
        raise ValueError(
            f"the API would be served on {host} (http_options.host), which other hosts can "
            "reach, with no API key: set one (SPLITSERVE_API_KEY in the ingress's "
            "environment, ingress.api_key_file or ingress.api_key), serve on 127.0.0.1, "
            "or, where a firewall or a proxy of your own guards the port, set "
            "ingress.allow_network_without_key: true"
        )

    def without_key(self) -> IngressConfig:
        """This config less the key, for replicas that do not check it (the pools)."""
        return self.model_copy(update={"api_key": None, "api_key_file": None})


MIN_KEY_LENGTH = 16


def check_key(key: str, where: str) -> str:
    """``key`` if it is long enough to be a key, else ``ValueError`` naming ``where``."""
    key = key.strip()
    if len(key) < MIN_KEY_LENGTH:
        raise ValueError(
            f"{where}: an API key needs at least {MIN_KEY_LENGTH} characters, got {len(key)}"
        )
    return key


def read_key_file(path: str) -> tuple[str, ...]:
    """The keys in ``path`` (one a line), which only its owner may read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ValueError(f"ingress.api_key_file {path}: {exc.strerror}") from exc
    if mode & 0o077:
        raise ValueError(
            f"ingress.api_key_file {path} is readable by others (mode {mode & 0o777:o}): "
            "`chmod 600` it"
        )
    with open(path, encoding="utf-8") as file:
        lines = [line.strip() for line in file]
    where = f"ingress.api_key_file {path}"
    keys = tuple(check_key(line, where) for line in lines if line and not line.startswith("#"))
    if not keys:
        raise ValueError(f"{where} holds no key")
    return keys
