"""What the app exports: per-request histograms, the engines' metrics by pool, transfer
and refusal counters (every series from 0), and ``GET /metrics`` in vLLM's names."""
