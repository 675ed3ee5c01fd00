"""TTFT split into the stages the dashboard shows."""

from app.flow.request_timings import RequestTimings
from app.kv.fallback import Attempt, TransferReport, Transport
from app.observability.request_metrics import ttft_stages


def test_a_disaggregated_request_has_every_stage_and_the_kv_read_leaves_the_first_step():
    timings = RequestTimings(
        prefill_queue_s=0.01,
        prefill_s=0.2,
        decode_queue_s=0.03,
        kv_fetch_s=0.05,
        decode_first_token_s=0.08,
        transfer=TransferReport([Attempt(Transport.NIXL)]),
    )
    stages = ttft_stages(timings)
    assert stages.keys() == {
        "ingress",
        "prefill_queue",
        "prefill",
        "kv_transfer",
        "decode_queue",
        "first_decode_step",
    }
    assert stages["first_decode_step"] == 0.08 - 0.05
    assert stages["kv_transfer"] == 0.05


def test_a_local_prefill_has_no_prefill_or_transfer_stage():
    timings = RequestTimings(
        decode_queue_s=0.02, decode_first_token_s=0.3, transfer=TransferReport(remote_prefill=False)
    )
    assert ttft_stages(timings) == {
        "ingress": 0.0,
        "decode_queue": 0.02,
        "first_decode_step": 0.3,
    }
