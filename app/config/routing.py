"""Where requests go and how calls travel: `router:`, `request_path:`, `migration:`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.config.base import Strict


class RouterConfig(Strict):
    """How requests are spread over replicas, and when to disaggregate at all."""

    prefill_policy: Literal["prefix_affinity", "serve_default"] = Field(
        "prefix_affinity",
        description="Prefill pool (colocated: the only pool): `prefix_affinity` sends prompts "
        "sharing a prefix to the same replica; `serve_default` is Serve's power-of-two choice.",
    )
    decode_policy: Literal["kv_capacity", "serve_default"] = Field(
        "kv_capacity",
        description="Decode pool: `kv_capacity` prefers the replica holding the request's "
        "session (`x-session-id`) or the longest prefix of its prompt, then the one with "
        "the most free KV cache.",
    )
    prefix_block_tokens: int = Field(
        64,
        gt=0,
        description="Prefix hashing granularity, tokens (with `prefix_source: kv_events`, "
        "the engines' own block).",
    )
    prefix_source: Literal["routed", "kv_events"] = Field(
        "routed",
        description="What the routers take a replica's prefix cache to hold: `routed`, the "
        "prompts (and answers) sent there, which cannot see evictions or restarts; "
        "`kv_events`, what its engine's KV events say it holds (vLLM's BlockStored and "
        "BlockRemoved, read by the ingress as they happen; docs/configuration.md).",
    )
    max_imbalance: int = Field(
        4, ge=0, description="Queue-length gap beyond which load beats prefix affinity."
    )
    local_prefill_below_tokens: int = Field(
        512,
        ge=0,
        description="Prompts shorter than this, or of which the decode replica holding the "
        "conversation lacks fewer tokens than this, are prefilled on the decode replica (no "
        "transfer); 0 disaggregates every request.",
    )
    max_prefill_backlog: int = Field(
        16,
        gt=0,
        description="Prefills in flight from one ingress beyond which new requests are "
        "prefilled on decode instead of waiting.",
    )
    first_token_on_prefill: bool = Field(
        True,
        description="A remote prefill samples the answer's first token with the request's "
        "own sampling parameters and the client gets it at once, before the KV moves; "
        "decode continues from prompt + that token. Only for sampling a continuation "
        "cannot tell apart (no seed, penalties, stop strings, logprobs or structured "
        "output) and over NIXL.",
    )


class RequestPathConfig(Strict):
    """How calls travel between the app's replicas (Ray Serve settings; docs/performance.md)."""

    grpc: bool = Field(
        True,
        description="Send the ingress's calls to the pools by value over Serve's gRPC "
        "channel instead of as Ray actor calls. Calls that carry an object-store KV "
        "reference always go as Ray calls, which keep the reference alive.",
    )
    direct_stream: bool = Field(
        True,
        description="A decode or colocated replica on the ingress's host pushes the "
        "stream's token chunks to the ingress over a local socket (ZeroMQ over IPC, in a "
        "directory only the app's user can open) instead of yielding each through "
        "Serve; Serve still carries the call, its start, its errors and its end. A "
        "replica on another host yields through Serve.",
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


class MigrationConfig(Strict):
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
        "restarting the only replica, warm-up included), or a begun stream for room in "
        "the decode pool's full queue; then the client gets the error.",
    )
    retry_interval_s: float = Field(
        1.0,
        gt=0,
        description="Pause between sends of a lost request no replica took yet "
        "(or of a begun stream the decode pool's full queue refused).",
    )
