"""What the serving path's front end costs in CPU, for the simulator to charge.

Every request and every streamed chunk passes through Python processes: Serve's proxy,
the ingress, the replica that hosts each engine. Where they run on the engines' cores
(no core is left for them), their CPU time is taken from the engines. The simulator
(:mod:`app.advice.simulator`) models them as one FIFO server that each request visits on
arrival and each chunk on its way out, sharing ``Topology.cores`` with the engines the
way Linux's fair scheduler shares a core: every runnable process gets an equal share.

The costs come from a run other than the one predicted
(:mod:`load_tests.frontend_fit`): the front-end processes' CPU seconds over workloads
that differ in requests, chunks and remote prefills, solved for the three costs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FrontEndCost:
    request_s: float  # CPU per request: HTTP, tokenizing, routing, the decode call
    remote_request_s: float  # extra CPU per remotely prefilled request: the prefill hop
    chunk_s: float  # CPU per streamed chunk (replica, ingress, proxy)
    # How the decode replica batches tokens into chunks (the pool's stream settings):
    # each stream waits (streams on the replica) / messages_per_s between chunks, at most
    # max_interval_s.
    messages_per_s: float = 200.0
    max_interval_s: float = 0.05

    def __post_init__(self) -> None:
        if min(self.request_s, self.remote_request_s, self.chunk_s) < 0:
            raise ValueError("front-end costs cannot be negative")

    def chunk_interval_s(self, streams: int) -> float:
        """The least time between two chunks of one stream, with ``streams`` on its replica."""
        if self.messages_per_s <= 0:
            return 0.0
        return min(self.max_interval_s, streams / self.messages_per_s)

    @classmethod
    def from_fit(cls, path: str | Path) -> FrontEndCost:
        """The costs a :mod:`load_tests.frontend_fit` run wrote, streamed as the default
        config's decode pool streams."""
        from app.config import AppConfig

        fitted = json.loads(Path(path).read_text())
        decode = AppConfig().decode
        return cls(
            request_s=float(fitted["request_s"]),
            remote_request_s=float(fitted["remote_request_s"]),
            chunk_s=float(fitted["chunk_s"]),
            messages_per_s=decode.stream_messages_per_s,
            max_interval_s=decode.stream_interval_ms / 1000,
        )
