"""The model a config names, as files vLLM loads: ``builtin:`` models generated and cached
here (:mod:`app.model.source`, :mod:`app.model.tiny_llama`), anything else passed on.
The engine, the planner and the benchmarks all read it."""
