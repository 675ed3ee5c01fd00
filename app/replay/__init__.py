"""Trace replay: real arrivals and lengths, open loop, against any OpenAI-compatible server.

- :mod:`app.replay.trace`: a trace file (Azure's LLM inference trace format), a window of
  it, and the stated rate and length scales;
- :mod:`app.replay.client`: the open-loop sender and each request's record;
- :mod:`app.replay.slo`: SLO attainment and the fluidity-index of a run.
"""
