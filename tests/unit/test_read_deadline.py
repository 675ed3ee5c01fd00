"""The read deadline's pure parts: which reads are late, the refusals remembered."""

from app.kv.read_deadline import RefusedReads, late_reads


def test_only_awaited_reads_past_their_deadline_are_late():
    deadlines = {"a": 10.0, "b": 20.0, "c": 5.0}
    # "c" is past its deadline but is not a read that waits for KV (a full local hit).
    assert late_reads(deadlines, ["a", "b", "d"], now=15.0) == ["a"]
    assert late_reads(deadlines, ["a", "b"], now=20.0) == ["a", "b"]
    assert late_reads({}, ["a"], now=1e12) == []


def test_a_refusal_is_answered_once_and_only_the_latest_are_kept():
    refused = RefusedReads(keep=2)
    for request_id in ("a", "b", "c"):
        refused.add(request_id)
    assert refused.take(["a", "b", "x"]) == ["b"]
    assert refused.take(["b", "c"]) == ["c"]
    assert refused.take(["c"]) == []
