"""One trace per request, exported for real: the default app with `tracing.otlp_endpoint`
set to a receiver in this test (OpenTelemetry's OTLP/HTTP exporter, protobuf).

For a prompt prefilled remotely and one prefilled on decode, streamed and not, one with
the client's own ``traceparent``: the response returns the trace's context; the trace
holds the root span (``splitserve.request``) with ``ingress``, ``route`` and ``decode``
under it, and for the remote prompt ``prefill`` and ``kv_transfer`` (NIXL, its bytes and
path); the engines' own spans (vLLM's ``llm_request``, one per engine that ran the
request, from each engine replica's exporter) are in the same trace under the root.

Runs in the lifecycle session: it starts and stops a Ray cluster of its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from load_tests.systems.local_app import LocalApp
from tests.harness.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.integration.helpers import GREEDY, random_prompt

CONFIG = Path(__file__).parents[2] / "serve_configs" / "default.yaml"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"
REMOTE_TOKENS = 600  # above the default config's local_prefill_below_tokens (512)


def _wait_for(
    receiver: OtlpReceiver, trace_id: str, names: set[str], engines: int
) -> list[ReceivedSpan]:
    """The trace's spans once ``names`` and ``engines`` engine spans are in (the exporters
    send in batches, every 5 s)."""
    deadline = time.monotonic() + 40
    while True:
        spans = receiver.trace(trace_id)
        got = {s.name for s in spans}
        if names <= got and sum(s.name == "llm_request" for s in spans) >= engines:
            return spans
        if time.monotonic() > deadline:
            pytest.fail(f"trace {trace_id}: {sorted(got)} after 40 s; wanted {sorted(names)}")
        time.sleep(0.5)


def test_each_request_is_one_trace_with_its_stages_and_the_engines_spans():
    with (
        OtlpReceiver() as receiver,
        LocalApp(CONFIG, overrides={"tracing": {"otlp_endpoint": receiver.url}}) as app,
    ):
        cases = [
            ("remote", REMOTE_TOKENS, False, {"traceparent": CLIENT_PARENT}),
            ("remote", REMOTE_TOKENS, True, {}),
            ("local", 16, False, {}),
            ("local", 16, True, {}),
        ]
        traces = []
        with httpx.Client(timeout=120) as http:
            for n, (path, length, stream, headers) in enumerate(cases):
                body = {
                    **GREEDY,
                    "model": "tiny-llama",
                    "prompt": random_prompt(900 + n, length),
                    "stream": stream,
                }
                with http.stream(
                    "POST", app.url + "/v1/completions", json=body, headers=headers
                ) as response:
                    response.read()
                    assert response.status_code == 200, response.text
                    traceparent = response.headers["traceparent"]
                _, trace_id, root_id, _ = traceparent.split("-")
                traces.append((path, trace_id, root_id))
        assert traces[0][1] == CLIENT_TRACE  # the client's trace, continued

        for path, trace_id, root_id in traces:
            stages = {"splitserve.request", "ingress", "route", "decode"}
            if path == "remote":
                stages |= {"prefill", "kv_transfer"}
            engines = 2 if path == "remote" else 1
            spans = _wait_for(receiver, trace_id, stages, engines)
            by_name = {s.name: s for s in spans}
            root = by_name["splitserve.request"]
            assert root.span_id == root_id and root.service == "splitserve"
            assert root.attributes["http.response.status_code"] == 200
            for name in stages - {"splitserve.request"}:
                assert by_name[name].parent_span_id == root_id, (name, spans)
            assert by_name["route"].attributes["splitserve.decision"] == path
            if path == "remote":
                transfer = by_name["kv_transfer"].attributes
                assert transfer["splitserve.transport"] == "nixl", transfer
                assert transfer["splitserve.path"] == "nixl"
                assert int(transfer["splitserve.kv_bytes"]) > 0
                prefill = by_name["prefill"]
                assert prefill.start_ns <= by_name["kv_transfer"].start_ns <= root.end_ns
            engine_spans = [s for s in spans if s.name == "llm_request"]
            assert all(s.parent_span_id == root_id for s in engine_spans), engine_spans
            services = sorted(s.service for s in engine_spans)
            want = (
                ["splitserve-decode", "splitserve-prefill"]
                if path == "remote"
                else ["splitserve-decode"]
            )
            assert services == want, services
            assert not any(s.error for s in spans), spans
