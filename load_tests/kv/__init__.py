"""Benchmarks of moving the KV: NIXL against the object store and a memcpy
(``kv_transfer_bench``), over a shaped link between two test hosts (``link_bench``), and
what a GPU host shows of the GPU path (``gpu_check``)."""
