import pytest

from app.kv.fallback import TransferReport, Transport, transfer_plan
from app.kv.payload import (
    VERSION,
    LayerSlab,
    PayloadError,
    PayloadHeader,
    decode_header,
    encode_header,
)

NX, OS, RC = Transport.NIXL, Transport.OBJECT_STORE, Transport.RECOMPUTE


@pytest.mark.parametrize(
    ("kind", "nixl", "plan"),
    [
        ("auto", True, (NX, OS, RC)),
        ("auto", False, (OS, RC)),
        ("nixl", True, (NX, RC)),
        ("object_store", True, (OS, RC)),
    ],
)
def test_every_plan_ends_in_recompute(kind, nixl, plan):
    assert transfer_plan(kind, nixl) == plan


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="carrier-pigeon"):
        transfer_plan("carrier-pigeon", True)


def _header(data_len=8):
    slab = LayerSlab("layers.0", "bfloat16", (2, 1, 4), block_dim=1, offset=0, nbytes=data_len)
    return PayloadHeader(VERSION, block_size=16, num_tokens=10, num_blocks=1, layers=(slab,))


def test_payload_header_round_trips():
    raw = encode_header(_header()) + bytes(8)
    header, start = decode_header(raw)
    assert header == _header()
    assert start == len(raw) - 8


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda b: b"XXXX" + b[4:], "bad magic"),
        (lambda b: b[:4] + (99).to_bytes(4, "little") + b[8:], "version 99"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b[:20], "truncated inside its header"),
        (lambda b: b[:3], "too short"),
    ],
)
def test_bad_payloads_are_refused_by_name(mutate, words):
    raw = encode_header(_header()) + bytes(8)
    with pytest.raises(PayloadError, match=words):
        decode_header(mutate(raw))


def test_report_names_the_serving_transport_and_fallbacks():
    from app.kv.failure import FailureKind, TransferFailure
    from app.kv.fallback import Attempt

    failed = TransferFailure(FailureKind.KV_LOAD, "x")
    report = TransferReport(attempts=[Attempt(NX, failed), Attempt(OS)])
    assert report.transport is OS and not report.unserved
    assert [a.transport for a in report.fallbacks] == [NX]
    assert TransferReport().transport is None and not TransferReport().unserved
    assert TransferReport(attempts=[Attempt(NX, failed), Attempt(RC, failed)]).unserved


def test_payload_files_of_dead_processes_are_swept(tmp_path):
    import os
    import subprocess

    from app.kv.object_store import PREFIX, sweep_orphans

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = tmp_path / f"{PREFIX}{os.getpid()}-prefill-aa"
    orphan = tmp_path / f"{PREFIX}{dead.pid}-decode-bb"
    unnamed = tmp_path / f"{PREFIX}prefill-cc"  # no owner in its name: nobody's
    other = tmp_path / "not-a-payload"
    for path in (mine, orphan, unnamed, other):
        path.write_bytes(b"kv")
    assert sorted(sweep_orphans(tmp_path)) == sorted([orphan, unnamed])
    assert mine.exists() and other.exists()
