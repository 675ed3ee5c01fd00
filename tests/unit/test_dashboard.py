"""The Grafana dashboard's shape; tests/integration/test_observability.py checks its names."""

import inspect

from app.flow import request_metrics, transfer_metrics
from tests.dashboard_names import EXPORTED_ON_EVENT, dashboard, expressions, metric_names


def test_every_panel_queries_prometheus_through_the_datasource_variable():
    board = dashboard()
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "application"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_expressions_are_balanced_and_read_ray_exported_series():
    for expr in expressions():
        assert expr.count("(") == expr.count(")"), expr
        assert expr.count("[") == expr.count("]"), expr
        assert "ray_" in expr, expr
        # Every series is filtered to the chosen Serve applications.
        assert expr.count("ray_") == expr.count('{application=~"$application"}'), expr


def test_the_dashboard_shows_what_an_operator_sizes_pools_by():
    names = metric_names()
    for needed in (
        "ray_splitserve_engine_busy_seconds_total",  # utilization per pool
        "ray_vllm_kv_cache_usage_perc",
        "ray_vllm_num_requests_waiting",
        "ray_splitserve_ttft_stage_seconds_bucket",
        "ray_splitserve_itl_seconds_bucket",
        "ray_vllm_request_time_per_output_token_seconds_bucket",
        "ray_splitserve_kv_transfer_bytes_total",
        "ray_splitserve_kv_fallbacks_total",
        "ray_splitserve_disaggregation_decisions_total",
    ):
        assert needed in names


def test_event_counters_are_declared_where_the_app_and_vllm_record_them():
    from vllm.v1.metrics import loggers

    sources = "".join(inspect.getsource(m) for m in (transfer_metrics, request_metrics, loggers))
    for declared in EXPORTED_ON_EVENT.values():
        assert f'"{declared}"' in sources, declared
