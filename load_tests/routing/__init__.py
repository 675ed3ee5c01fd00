"""Benchmarks of the routers: prefix affinity against Serve's default choice
(``prefix_bench``), and the prefix router fed by what it routed against the engines' KV
events, under evictions (``prefix_index_bench``)."""
