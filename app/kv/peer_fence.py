"""A decode engine forgets a dead prefill engine at once (fencing).

Each prefill engine has an id of its own (a new one each time a replica starts), and a
decode engine keeps its NIXL state (the handshake, the peer's memory descriptors) by
that id. vLLM 0.32 drops a peer's state when another engine takes its address, when a
read from it failed and its metadata is gone, or after an idle TTL; until then, reads
from a dead peer wait for NIXL to give up. When a decode replica learns that the prefill
replica named in a request is gone (``app.engine.server``), it refuses the request's KV at once
(``kv_fenced``) and calls :data:`METHOD`, which marks the peer invalid the way vLLM does
itself: new reads from it fail fast, and its NIXL state is released once the reads in
flight drain.
"""

from __future__ import annotations

import time

METHOD = "splitserve_forget_peers"


class PeerFenceWorker:
    """Mixed into vLLM's worker class by ``worker_extension_cls`` (decode engines)."""

    def splitserve_forget_peers(self, engine_ids: list[str]) -> list[str]:
        """Mark each known peer of ``engine_ids`` invalid; the ids that were known."""
        from app.kv.lease_release import nixl_worker

        worker = nixl_worker()
        if worker is None:
            return []
        known = [e for e in engine_ids if e in worker._remote_agents]
        now = time.perf_counter()
        for engine_id in known:
            if engine_id not in worker._invalid_remote_engines:
                worker._mark_remote_engine_invalid(engine_id, now)
        return known
