"""One request across the pools: whether to disaggregate, prefill then decode with the
transport fallback, a lost stream moved to another replica, and the records and
timings that travel with it (no Ray, no vLLM engine: pools are reached through
:class:`app.pool.client.PoolClient`)."""
