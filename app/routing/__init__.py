"""Choosing replicas (pure logic, no Ray).

- ``prefix_affinity``: send prompts that share a prefix to the replica that most likely
  caches it, unless that replica is much busier than the others;
- ``kv_capacity``: send decode work to the replica with the most free KV cache;
- ``decode_affinity``: which decode replica holds a conversation (its prefixes, its
  ``x-session-id``): the decode router prefers it, the remote-or-local decision counts
  what it lacks.

The Ray Serve request routers that apply them live in ``deployments/request_routers.py``.
Whether a request is disaggregated at all is :mod:`app.flow.disaggregation`.
"""
