"""How a prompt's KV cache gets from a prefill engine to a decode engine.

- ``fallback``: which transports a request tries, in which order (the chain
  NIXL → Ray object store → local recompute), and the record of what happened;
- ``failure``: why one try failed (a kind for metrics, a message for people);
- ``timed_nixl``: vLLM's NIXL connector, measuring each read and refusing a late one
  (``read_deadline``); ``kv_read``: the read's record on the final output;
- ``peer_fence``: a decode engine forgets a dead prefill engine at once;
- ``lease_release``: a prefill engine frees a failed attempt's blocks now, and says how
  many it still holds (a stopping replica's drain);
- ``payload``: the versioned byte format of a KV payload (header + blocks);
- ``object_store``: moving a payload through the Ray object store (replica side);
- ``object_store_connector``: the vLLM KV connector that writes and reads payloads
  inside the engine's worker process (imported by vLLM by module path);
- ``nixl_progress``: the vLLM plugin that keeps NIXL's progress thread from spinning.
"""
