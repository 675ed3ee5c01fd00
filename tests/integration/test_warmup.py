"""Ready means warm: the first request after ready moves its KV over NIXL, no fallback."""

from tests.integration.conftest import Apps
from tests.integration.faults import handle


def test_the_first_request_after_ready_goes_remote_over_nixl(apps: Apps):
    report = apps.first_response["splitserve"]
    assert report["decision"] == "long_prompt" and report["disaggregated"] is True
    # Cold, the prefill timed out and decode recomputed: a fallback here means the
    # replicas took traffic before their one-time work was done.
    assert report["kv_transport"] == "nixl" and report["fallbacks"] == [], report
    assert apps.first_response["usage"]["completion_tokens"] == 8


def test_decode_replicas_warmed_their_pair_over_every_transport():
    warmup = handle("Decode").warmup_report.remote().result()
    # serve_configs/default.yaml: transport auto, so NIXL then the object store.
    assert warmup["transports"] == {"nixl": "ok", "object_store": "ok"}, warmup
    assert warmup["peers"] == 1  # every prefill replica
    assert warmup["engine_s"] > 0 and warmup["pair_s"] > 0


def test_prefill_replicas_warmed_their_engine():
    # At the app's start no decode replica was running: decode paired with prefill.
    # (A prefill replica that joins later pairs itself: tests/integration/test_faults.py.)
    warmup = handle("Prefill").warmup_report.remote().result()
    assert warmup["engine_s"] > 0 and warmup["transports"] == {} and warmup["peers"] == 0
