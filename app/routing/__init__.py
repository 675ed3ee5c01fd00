"""Choosing replicas and whether to disaggregate (pure logic, no Ray).

- ``prefix_affinity``: send prompts that share a prefix to the replica that most likely
  caches it, unless that replica is much busier than the others;
- ``kv_capacity``: send decode work to the replica with the most free KV cache;
- ``disaggregation``: per request, remote prefill or local prefill on decode.

The Ray Serve request routers that apply the first two live in
``deployments/request_routers.py``.
"""
