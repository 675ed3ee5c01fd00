"""Reading per-pool counters from the app's /metrics page (vLLM's layout)."""

from load_tests.planning.frontend_fit import STEPS
from load_tests.systems.pool_usage import BUSY, sum_by_pool

PAGE = """\
# HELP vllm:iteration_tokens_total Number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="1.0",pool="decode",replica="d1"} 40.0
vllm:iteration_tokens_total_bucket{le="+Inf",pool="decode",replica="d1"} 100.0
vllm:iteration_tokens_total_count{pool="decode",replica="d1"} 100.0
vllm:iteration_tokens_total_sum{pool="decode",replica="d1"} 900.0
vllm:iteration_tokens_total_count{pool="decode",replica="d2"} 50.0
vllm:iteration_tokens_total_count{pool="prefill",replica="p1"} 7.0
# HELP splitserve_engine_busy_seconds_total Wall seconds busy.
# TYPE splitserve_engine_busy_seconds_total counter
splitserve_engine_busy_seconds_total{pool="decode",replica="d1"} 1.5
"""


def test_a_histograms_count_is_summed_per_pool_over_its_replicas():
    assert sum_by_pool(PAGE, STEPS) == {"decode": (150.0, 2), "prefill": (7.0, 1)}
    assert sum_by_pool(PAGE, BUSY) == {"decode": (1.5, 1)}


def test_a_page_without_the_series_says_so():
    assert sum_by_pool("# nothing here\n", STEPS) is None
