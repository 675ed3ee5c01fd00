"""How long a decode replica may still start reading the NIXL blocks a prefill kept."""

from __future__ import annotations

import time

# Beyond vLLM's heartbeat interval: the hop into the decode engine, and clock skew.
_LEASE_SLACK_S = 2.0


def kv_expiry(lease_s: float) -> float:
    """The latest a decode replica may start reading NIXL blocks prefill just kept.

    Decode's engine renews prefill's lease by heartbeats once the request is in its
    scheduler, but vLLM 0.32 sends them every ``kv_lease_s // 6`` s on one timer for
    all requests: a request added just after a heartbeat waits that long for its
    first. So a decode start needs more than that interval of lease left, plus a
    margin for the hop into the engine and for clocks; else prefill could free and
    reuse the blocks under the read (wrong tokens, no error).
    """
    return time.time() + lease_s - (lease_s // 6 + _LEASE_SLACK_S)
