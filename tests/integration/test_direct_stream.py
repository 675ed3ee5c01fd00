"""The direct token stream (request_path.direct_stream, on in the shipped configs): on one
host the decode and colocated replicas push their chunks to the ingress's socket, and
the answers are those of the path through Serve's handle."""

from __future__ import annotations

import pytest
from ray import serve

from tests.integration.helpers import GREEDY, complete, random_prompt, stream_events, streamed_text


def _counts(app: str) -> dict[str, int]:
    counts: dict[str, int] = (
        serve.get_deployment_handle("Ingress", app).stream_counts.remote().result()
    )
    return counts


@pytest.mark.parametrize("app", ["splitserve", "colocated"])
def test_a_stream_on_one_host_comes_through_the_ingress_socket(apps, http, app):
    base = apps.disaggregated if app == "splitserve" else apps.colocated
    before = _counts(app)
    prompt = random_prompt(4242, 40)
    body = {**GREEDY, "prompt": prompt, "max_tokens": 24}
    events = stream_events(http, base, "/v1/completions", body)
    text_events = [e for e in events if isinstance(e, dict) and e["choices"][0]["text"]]
    after = _counts(app)
    # The stream's chunks were pushed: at least one per text event (an event may carry
    # several chunks' tokens), and none arrived after its stream had ended.
    assert after["received"] - before["received"] >= len(text_events) >= 1
    assert after["undeliverable"] == before["undeliverable"]
    assert streamed_text(events) == complete(http, base, body)["choices"][0]["text"]
