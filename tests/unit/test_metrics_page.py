"""The /metrics page rendered from Ray's metrics export text (samples shaped as Ray 2.60
writes), read and written by prometheus_client."""

from app.observability.metrics_page import render, served_name

RAY_LABELS = (
    'Component="core_worker",NodeAddress="10.0.0.{node}",ReplicaId="{replica}",'
    'SessionName="session_x",Version="2.60.0",WorkerId="w{replica}",'
    'otel_scope_name="ray._private.telemetry",otel_scope_schema_url="",otel_scope_version=""'
)


def _export(node: int, replica: str, pool: str, running: float, app: str = "splitserve") -> str:
    labels = RAY_LABELS.format(node=node, replica=replica) + f',application="{app}"'
    return "\n".join(
        [
            "# HELP ray_vllm_num_requests_running Number of requests in model execution batches.",
            "# TYPE ray_vllm_num_requests_running gauge",
            f'ray_vllm_num_requests_running{{{labels},engine="0",model_name="tiny",pool="{pool}"}}'
            f" {running}",
            "# HELP ray_splitserve_engine_busy_seconds_total Wall seconds busy.",
            "# TYPE ray_splitserve_engine_busy_seconds_total counter",
            f'ray_splitserve_engine_busy_seconds_total{{{labels},pool="{pool}"}} 1.5',
            "# HELP ray_grpc_server_req_process_time_milliseconds Ray's own series.",
            "# TYPE ray_grpc_server_req_process_time_milliseconds gauge",
            f"ray_grpc_server_req_process_time_milliseconds{{{labels}}} 3.0",
        ]
    )


def test_names_are_the_ones_the_app_and_vllm_gave():
    assert served_name("ray_vllm_kv_cache_usage_perc") == "vllm:kv_cache_usage_perc"
    assert served_name("ray_splitserve_ttft_seconds_bucket") == "splitserve_ttft_seconds_bucket"
    assert served_name("ray_serve_num_http_requests_total") is None
    assert served_name("ray_node_cpu_utilization") is None


def test_only_the_apps_series_are_served_with_pool_and_replica_labels():
    page = render([_export(1, "abc", "decode", 2.0)], "splitserve")
    lines = page.splitlines()
    assert "# TYPE vllm:num_requests_running gauge" in lines
    assert "# TYPE splitserve_engine_busy_seconds_total counter" in lines
    assert (
        'vllm:num_requests_running{application="splitserve",engine="0",model_name="tiny",'
        'node="f5047344122f",pool="decode",replica="abc",worker="wabc"} 2.0'
    ) in lines  # prometheus_client writes labels in name order
    assert "grpc" not in page
    for dropped in ("Component", "SessionName", "Version", "otel_scope", "ReplicaId"):
        assert dropped not in page


def test_families_from_several_nodes_share_one_header():
    page = render([_export(1, "p1", "prefill", 0.0), _export(2, "d1", "decode", 3.0)], "splitserve")
    lines = page.splitlines()
    assert lines.count("# TYPE vllm:num_requests_running gauge") == 1
    samples = [line for line in lines if line.startswith("vllm:num_requests_running{")]
    assert len(samples) == 2
    assert any('pool="prefill"' in s and s.endswith(" 0.0") for s in samples)
    assert any('pool="decode"' in s and s.endswith(" 3.0") for s in samples)
    # Each sample line sits under its own family's header.
    busy_header = lines.index("# TYPE splitserve_engine_busy_seconds_total counter")
    assert all(lines.index(s) < busy_header for s in samples)


def test_label_values_with_quotes_and_commas_survive():
    text = (
        "# TYPE ray_splitserve_kv_fallbacks_total counter\n"
        'ray_splitserve_kv_fallbacks_total{application="a",reason="a \\"b\\", c",'
        'transport="nixl"} 1.0\n'
    )
    page = render([text], "a")
    assert (
        'splitserve_kv_fallbacks_total{application="a",reason="a \\"b\\", c",transport="nixl"} 1.0'
        in page
    )


def test_other_applications_series_are_left_out():
    page = render(
        [_export(1, "mine", "decode", 1.0), _export(1, "theirs", "colocated", 5.0, app="other")],
        "splitserve",
    )
    assert 'replica="mine"' in page
    assert "theirs" not in page and "colocated" not in page
    assert render([_export(1, "theirs", "colocated", 5.0, app="other")], "splitserve") == ""


def test_nothing_exported_renders_an_empty_page():
    assert render([""], "splitserve").strip() == ""


async def test_scrapes_close_together_share_one_read_of_the_agents():
    import asyncio

    from deployments.metrics_export import RayMetricsExport

    reads = []

    async def read() -> str:
        reads.append(1)
        await asyncio.sleep(0.01)
        return f"page {len(reads)}\n"

    export = RayMetricsExport("splitserve", max_age_s=60)
    export._read = read  # type: ignore[method-assign]
    pages = await asyncio.gather(*(export.page() for _ in range(5)))
    assert pages == ["page 1\n"] * 5 and len(reads) == 1
    export.max_age_s = 0
    assert await export.page() == "page 2\n"
