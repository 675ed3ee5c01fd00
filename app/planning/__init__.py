"""Should you disaggregate? Numbers for the decision, from model configs and measurements.

- ``kv_size``: KV bytes per token and per request from a model config (GQA, MLA, FP8,
  tensor parallelism) and the time to move them over a link;
- ``checks``: five checks before disaggregating, each a number against a threshold, and a verdict;
- ``engine_profile``: per-engine costs measured on the actual hardware (prefill time vs
  prompt tokens, decode step time vs batch size), saved as JSON;
- ``simulator``: a discrete-event model of arrivals through a prefill pool, a transfer
  link and a decode pool (or a colocated pool) that yields TTFT/TPOT per request;
- ``planner``: searches prefill:decode ratios (and colocated) for goodput per accelerator.

``app/cli.py`` exposes them as ``splitserve advise | plan | profile``.
"""
