"""Benchmarks of the serving path, each beside its peers in one run: side by side on one
load (``compare``), real traffic (``replay_compare``, ``trace_bench``), what the path costs
in CPU (``serving_cost``), NVIDIA's AIPerf as the client (``aiperf_bench``), conversations
(``conversation_bench``), and where one request's time
and an idle app's CPU go (``path_profile``)."""
