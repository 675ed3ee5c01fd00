"""TTFT split into the stages the dashboard shows."""

from typing import Any

from app.flow.request_metrics import ttft_stages
from app.flow.request_timings import RequestTimings
from app.kv.fallback import Attempt, TransferReport, Transport


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


def test_after_a_first_token_from_prefill_the_hand_off_is_no_stage_of_ttft():
    timings = RequestTimings(
        prefill_queue_s=0.01,
        prefill_s=0.2,
        decode_queue_s=0.5,
        kv_fetch_s=0.05,
        decode_first_token_s=0.6,
        first_token_s=0.22,
        transfer=TransferReport([Attempt(Transport.NIXL)], first_token_on_prefill=True),
    )
    stages = ttft_stages(timings)
    assert stages.keys() == {"ingress", "prefill_queue", "prefill"}
    assert sum(stages.values()) <= timings.first_token_s


class Recorded:
    def __init__(self):
        self.calls = []

    def inc(self, value, tags=None):
        self.calls.append((value, tags))

    def observe(self, value, tags=None):
        self.calls.append((value, tags))


def test_a_request_that_moved_and_then_failed_counts_its_moves():
    from app.flow.migration import LostCause, Migration
    from app.flow.request_metrics import RayRequestMetrics

    metrics: Any = object.__new__(RayRequestMetrics)
    metrics._unfinished, metrics._migrations = Recorded(), Recorded()
    timings = RequestTimings(migrations=[Migration(LostCause.ENGINE_DIED, 4, "d-1", "gone")])
    metrics.unfinished(timings, "failed")
    assert metrics._migrations.calls == [(1, {"cause": "engine_died"})]
