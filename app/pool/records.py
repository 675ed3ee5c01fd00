"""Runtime records passed between the ingress and the engine pools (frozen dataclasses).

They cross Ray process boundaries, so they hold only picklable plain data and the vLLM
`SamplingParams` built by the ingress.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.kv.failure import TransferFailure


class Role(StrEnum):
    """What an engine replica does in the application."""

    PREFILL = "prefill"
    DECODE = "decode"
    COLOCATED = "colocated"


@dataclass(frozen=True)
class StreamTo:
    """Where a replica on the same host may push a stream's chunks instead of yielding
    them through Serve (app.pool.chunk_receiver): an ingress's socket and the stream's
    number there."""

    node_id: str  # the Ray node the ingress runs on; a replica on another node yields
    path: str  # the ingress's IPC socket, in a directory only its user can open
    stream_id: int


@dataclass(frozen=True)
class DirectEnd:
    """A replica's last item through Serve when it pushed the stream's items directly:
    how many it pushed, so the ingress knows when it has them all."""

    count: int


@dataclass(frozen=True)
class GenerateRequest:
    """One tokenized request, as the ingress hands it to a pool."""

    request_id: str
    prompt_token_ids: list[int]
    # vllm.SamplingParams; typed loosely so this module imports without vLLM.
    sampling_params: Any
    # Where decode finds the prompt's KV: NIXL's params, or a Ray object (an ObjectRef
    # to a KV payload) covering ``kv_num_tokens`` prompt tokens. Neither: recompute.
    kv_transfer_params: dict[str, Any] | None = None
    kv_object: Any = None
    kv_num_tokens: int = 0
    # Unix time after which prefill may have freed the NIXL blocks (its lease, less a
    # margin): a decode replica that starts the request later must not read them.
    kv_expires_at: float | None = None
    # The prefill replica (Serve unique id) that computed the KV. A decode replica
    # refuses NIXL KV from one that is gone (fencing) instead of trying to read it, and
    # measures each replica's link (app.kv.link_meter).
    kv_source: str = ""
    # Why this request must be prefilled on decode whatever its length (it needs the
    # prompt's logprobs, or it is a parallel sample whose prompt decode has cached).
    local_prefill_reason: str | None = None
    # The Serve replica (unique id) that should serve it: for warm-ups that pair two given
    # replicas, and for a conversation's next turn on the decode replica that caches its
    # history (app.routing.decode_affinity); empty: the pool's router chooses.
    replica: str = ""
    # The client's ``x-session-id`` (scoped by the cache salt): the decode router keeps a
    # session on one replica.
    session_id: str | None = None
    # The client's ``cache_salt``: the engines' prefix caches (and the routers' hashes)
    # share blocks only between requests of the same salt.
    cache_salt: str | None = None
    # The id of the request this one retries or continues (empty: itself), so what its
    # decode replica ends up caching is credited to that replica.
    origin_id: str = ""
    # Prefill only: sample the answer's first token with the request's own sampling
    # parameters and return it, where decode can continue from it (app.flow.first_token).
    sample_first_token: bool = False
    # W3C trace context (``traceparent``) of the request's trace, when the app traces:
    # the engine's own span (vLLM's ``llm_request``) joins it.
    trace_headers: dict[str, str] | None = None
    # vLLM's request priority in the engines (lower first; their `priority` scheduling
    # when the app has priority classes, else ignored).
    priority: int = 0
    # Where the replica may push the chunks directly (the ingress's socket on the same
    # host; app.pool.chunk_receiver); None: every chunk comes back through Serve.
    stream_to: StreamTo | None = None


@dataclass(frozen=True)
class Started:
    """A pool's first message for a request: its replica has handed it to the engine.

    Everything before it is Serve's queue; the ingress's timeouts on the prefill's own
    time and on the KV transfer start here.
    """

    engine_id: str


@dataclass(frozen=True)
class PrefillResult:
    """What the prefill pool returns: where decode finds the prompt's KV."""

    kv_transfer_params: dict[str, Any] | None
    num_prompt_tokens: int
    kv_object: Any = None  # object store: ObjectRef of the KV payload
    publish_s: float = 0.0
    num_cached_tokens: int = 0  # prompt tokens the prefill engine found in its prefix cache
    replica: str = ""  # the Serve replica that holds the KV (its unique id)
    # The answer's first token, sampled with the request's own parameters, when the
    # request asked for it (app.flow.first_token); else None.
    first_token: TokenChunk | None = None
    block_tokens: int = 0  # the prefill engine's KV cache block, in tokens


@dataclass(frozen=True)
class KvRelease:
    """A call for the prefill replica named ``replica`` (routed to it, not by policy): free
    the NIXL blocks ``kv_transfer_params`` locate, which no decode attempt will read."""

    replica: str
    kv_transfer_params: dict[str, Any]


@dataclass(frozen=True)
class BlocksQuery:
    """A call for the replica named ``replica``: what its engine's prefix cache gained and
    lost since ``since`` of ``epoch`` (``app.routing.engine_blocks.BlockChanges``), waiting
    up to ``wait_s`` for a change when there is none yet."""

    replica: str
    epoch: str | None
    since: int
    wait_s: float = 0.0  # an answer with no change waits this long for one


@dataclass(frozen=True)
class TokenChunk:
    """Newly generated tokens for one request since the previous chunk."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_cached_tokens: int = 0
    # vLLM's sample logprobs of these tokens, when the request asked for logprobs.
    logprobs: Any = None
    cumulative_logprob: float | None = None
    prompt_logprobs: Any = None  # first chunk only, when the request asked for them
    # On the first chunk only: the KV could not be used; nothing was generated.
    transfer_failed: TransferFailure | None = None
    # How the KV arrived, on the chunk that first knows it (object store: the first;
    # NIXL: the last, from the connector's record of the read).
    kv_bytes: int = 0  # bytes of KV this replica received for the request
    kv_fetch_s: float = 0.0  # getting the KV next to the engine
    # The answer's first token as the prefill engine sampled it (app.flow.first_token),
    # not a decode replica's: the hand-off to decode is still ahead.
    from_prefill: bool = False


@dataclass(frozen=True)
class EngineStats:
    """Counters read from one engine replica's vLLM Prometheus metrics."""

    role: Role
    engine_id: str
    counters: dict[str, float] = field(default_factory=dict)
