"""One trace per request: the root span continues the client's traceparent, and each stage
of the flow is a child span placed on the request's clock, the KV transfer with its
transport, bytes, path and fallbacks (OpenTelemetry's SDK with its in-memory exporter)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from app.config import TracingConfig
from app.flow import request_trace
from app.flow.migration import LostCause, Migration
from app.flow.request_timings import RequestTimings
from app.kv.failure import FailureKind, TransferFailure
from app.kv.fallback import Attempt, TransferReport, Transport
from app.observability.tracing import Tracing

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"
S = 1_000_000_000


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing = Tracing(TracingConfig(), "app", exporter=exporter)
    return tracing, exporter


def _by_name(exporter):
    return {s.name: s for s in exporter.get_finished_spans()}


def test_tracing_is_off_without_an_endpoint():
    assert not Tracing(TracingConfig()).enabled
    assert Tracing(TracingConfig()).start({}, {}) is None


def test_the_root_continues_the_clients_trace_and_says_so_in_its_headers(spans):
    tracing, exporter = spans
    root = tracing.start({"traceparent": CLIENT_PARENT}, {"http.route": "/v1/completions"})
    headers = root.headers()
    assert headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-")
    assert headers["traceparent"] != CLIENT_PARENT  # the root's own span id
    root.end(200)
    (span,) = exporter.get_finished_spans()
    assert span.name == "splitserve.request"
    assert format(span.context.trace_id, "032x") == CLIENT_TRACE
    assert format(span.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert span.attributes["http.response.status_code"] == 200
    root.end(500)  # once only
    assert len(exporter.get_finished_spans()) == 1


def test_a_new_trace_without_a_traceparent_and_errors_mark_the_root(spans):
    tracing, exporter = spans
    root = tracing.start({}, {})
    root.end(503)
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert span.status.status_code is StatusCode.ERROR


def test_a_remote_request_has_its_stages_in_order_with_the_transfer_s_figures(spans):
    tracing, exporter = spans
    root = tracing.start({"traceparent": CLIENT_PARENT}, {})
    report = TransferReport(
        attempts=[
            Attempt(Transport.NIXL, TransferFailure(FailureKind.KV_LOAD, "read failed")),
            Attempt(Transport.OBJECT_STORE),
        ],
        kv_bytes=4096,
        transfer_s=0.05,
        decision_reason="long_prompt",
    )
    timings = RequestTimings(
        ingress_s=0.01,
        prefill_queue_s=0.02,
        prefill_s=0.1,
        decode_queue_s=0.03,
        transfer=report,
        prefill_engine="prefill-1",
        decode_engine="decode-1",
        prompt_tokens=100,
        output_tokens=8,
        migrations=[Migration(LostCause.REPLICA_DIED, 3, "decode-0", "gone")],
    )
    start = 1_000 * S
    request_trace.record(root, timings, start, start + 2 * S, sample=0)
    root.end(200)
    spans = _by_name(exporter)
    assert set(spans) == {
        "splitserve.request", "ingress", "route", "prefill", "kv_transfer", "decode"
    }  # fmt: skip
    root_id = spans["splitserve.request"].context.span_id
    for name in ("ingress", "route", "prefill", "kv_transfer", "decode"):
        assert spans[name].parent.span_id == root_id, name
        assert format(spans[name].context.trace_id, "032x") == CLIENT_TRACE
    assert spans["ingress"].start_time == start - int(0.01 * S)
    assert spans["prefill"].start_time == start
    assert spans["prefill"].end_time == start + int(0.12 * S)
    transfer = spans["kv_transfer"]
    assert transfer.start_time == start + int(0.12 * S) + int(0.03 * S)
    assert transfer.end_time - transfer.start_time == int(0.05 * S)
    assert transfer.attributes["splitserve.transport"] == "object_store"
    assert transfer.attributes["splitserve.kv_bytes"] == 4096
    assert transfer.attributes["splitserve.path"] == "nixl>object_store"
    assert list(transfer.attributes["splitserve.fallbacks"]) == ["nixl:kv_load"]
    assert transfer.status.status_code is StatusCode.UNSET
    assert spans["route"].attributes["splitserve.decision"] == "remote"
    assert spans["route"].attributes["splitserve.reason"] == "long_prompt"
    decode = spans["decode"]
    assert (decode.start_time, decode.end_time) == (start + int(0.12 * S), start + 2 * S)
    assert decode.attributes["splitserve.engine"] == "decode-1"
    (event,) = decode.events
    assert event.name == "migration"
    assert event.attributes["splitserve.cause"] == "replica_died"


def test_a_local_request_has_no_prefill_or_transfer_span(spans):
    tracing, exporter = spans
    root = tracing.start({}, {})
    timings = RequestTimings(
        transfer=TransferReport(remote_prefill=False, decision_reason="short_prompt")
    )
    request_trace.record(root, timings, 5 * S, 6 * S, sample=1)
    spans = _by_name(exporter)
    assert set(spans) == {"ingress", "route", "decode"}
    assert spans["route"].attributes["splitserve.decision"] == "local"
    assert spans["decode"].start_time == 5 * S
    assert spans["decode"].attributes["splitserve.sample"] == 1


def test_an_unserved_transfer_and_a_failed_decode_are_errors(spans):
    tracing, exporter = spans
    root = tracing.start({}, {})
    failure = TransferFailure(FailureKind.DECODE_ERROR, "boom")
    timings = RequestTimings(
        transfer=TransferReport(attempts=[Attempt(Transport.RECOMPUTE, failure)])
    )
    request_trace.record(root, timings, 5 * S, 6 * S, error="failed")
    spans = _by_name(exporter)
    assert spans["kv_transfer"].status.status_code is StatusCode.ERROR
    assert spans["kv_transfer"].attributes["splitserve.transport"] == "none"
    assert spans["decode"].status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("stream", [False, True])
def test_an_http_request_is_one_trace_and_the_engines_get_its_context(engine_client, spans, stream):
    from tests.unit.http_api_fakes import FakePool, make_client

    tracing, exporter = spans
    decode, prefill = FakePool(), FakePool()
    client = make_client(engine_client, pool=decode, prefill=prefill, tracing=tracing)
    body = {"model": "tiny-llama", "prompt": [5, 6, 7, 8], "max_tokens": 3, "stream": stream}
    with client.stream(
        "POST", "/v1/completions", json=body, headers={"traceparent": CLIENT_PARENT}
    ) as response:
        assert response.status_code == 200
        returned = response.headers["traceparent"]
        response.read()
    assert returned.startswith(f"00-{CLIENT_TRACE}-")
    spans = _by_name(exporter)
    assert {"splitserve.request", "ingress", "route", "prefill", "kv_transfer", "decode"} <= set(
        spans
    )
    root = spans["splitserve.request"]
    assert returned.split("-")[2] == format(root.context.span_id, "016x")
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {CLIENT_TRACE}
    assert spans["kv_transfer"].attributes["splitserve.path"] == "nixl"
    assert root.attributes["http.response.status_code"] == 200
    # The engines' own spans join the trace under the root.
    for pool in (prefill.prefills, decode.requests):
        assert pool[-1].trace_headers == {"traceparent": returned}


def test_without_tracing_no_traceparent_is_returned(engine_client):
    from tests.unit.http_api_fakes import make_client

    client = make_client(engine_client)
    body = {"model": "tiny-llama", "prompt": [5, 6, 7, 8], "max_tokens": 3}
    response = client.post("/v1/completions", json=body, headers={"traceparent": CLIENT_PARENT})
    assert response.status_code == 200
    assert "traceparent" not in response.headers
