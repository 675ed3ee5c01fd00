"""What the app exports: per-request histograms, the engines' metrics by pool, transfer
and refusal counters (every series from 0), each link's measured bandwidth
(``link_meter``), and ``GET /metrics`` in vLLM's names; and what a replica reads of its
own engine (``engine_tally``)."""
