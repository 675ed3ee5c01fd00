"""How a prompt's KV cache gets from a prefill engine to a decode engine.

- ``fallback``: which transports a request tries, in which order (the chain
  NIXL → Ray object store → local recompute), and the record of what happened;
- ``payload``: the versioned byte format of a KV payload (header + blocks);
- ``object_store``: moving a payload through the Ray object store (replica side);
- ``object_store_connector``: the vLLM KV connector that writes and reads payloads
  inside the engine's worker process (imported by vLLM by module path);
- ``transfer_metrics``: Ray/Prometheus metrics of every transfer.
"""
