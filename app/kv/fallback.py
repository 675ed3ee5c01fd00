"""The transport chain: which ways of moving KV a request tries, in order, and what happened.

``auto`` tries NIXL first (when this host has it), then the Ray object store, then
recomputes the prompt on the decode replica. ``nixl`` and ``object_store`` try only that
transport before recomputing. Recompute needs no transfer, so a client never sees a
transfer failure, only (at worst) a slower first token; a request fails only when the
decode pool itself does.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from enum import StrEnum

from app.kv.failure import TransferFailure


class Transport(StrEnum):
    NIXL = "nixl"
    OBJECT_STORE = "object_store"
    RECOMPUTE = "recompute"


def nixl_installed() -> bool:
    """Whether the `nixl` package vLLM's NixlConnector imports is present."""
    return importlib.util.find_spec("nixl") is not None


def transfer_plan(kind: str, nixl_available: bool) -> tuple[Transport, ...]:
    """The transports to try for ``transport.kind`` = ``kind``, last resort included."""
    if kind == "nixl":
        return (Transport.NIXL, Transport.RECOMPUTE)
    if kind == "object_store":
        return (Transport.OBJECT_STORE, Transport.RECOMPUTE)
    if kind == "auto":
        first = (Transport.NIXL,) if nixl_available else ()
        return (*first, Transport.OBJECT_STORE, Transport.RECOMPUTE)
    raise ValueError(f"unknown transport kind {kind!r}")


def engine_transports(kind: str, nixl_available: bool) -> tuple[Transport, ...]:
    """The KV connectors an engine needs for ``kind`` (recompute needs none)."""
    return tuple(t for t in transfer_plan(kind, nixl_available) if t is not Transport.RECOMPUTE)


@dataclass(frozen=True)
class Attempt:
    """One try at moving a request's KV; ``failure`` is None when it served the request."""

    transport: Transport
    failure: TransferFailure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass
class TransferReport:
    """What moving one request's KV took: the attempts in order and the one that served it."""

    attempts: list[Attempt] = field(default_factory=list)
    kv_bytes: int = 0
    transfer_s: float = 0.0
    remote_prefill: bool = True  # False: conditional disaggregation chose local prefill
    decision_reason: str = ""
    # The client's first token came from the prefill engine (app.flow.first_token).
    first_token_on_prefill: bool = False

    @property
    def transport(self) -> Transport | None:
        """The transport that served the request; None for a local prefill (no KV moved)
        and for a request no transport served."""
        served = [a for a in self.attempts if a.ok]
        return served[-1].transport if served else None

    @property
    def unserved(self) -> bool:
        """A remote-prefill request whose every attempt failed (it ended in an error)."""
        return self.remote_prefill and bool(self.attempts) and self.transport is None

    @property
    def fallbacks(self) -> list[Attempt]:
        return [a for a in self.attempts if not a.ok]
