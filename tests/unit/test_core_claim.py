"""Replicas of a pool with `cpu_binding: "0|1"` each claim a core set no live replica holds."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

from app.engine import core_claim

CLAIMER = """
import sys, time
from app.engine import core_claim
print(core_claim.claim(sys.argv[1]), flush=True)
time.sleep(float(sys.argv[2]))
"""


def start_claimer(
    binding: str, env: dict[str, str], hold_s: float = 30.0
) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, binding, str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def test_each_replica_claims_its_own_set_and_a_dead_replicas_set_is_free_again(tmp_path):
    import os

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    first, got_first = start_claimer("0|1", env)
    second, got_second = start_claimer("0|1", env)
    try:
        assert {got_first, got_second} == {"0", "1"}
        third, got_third = start_claimer("0|1", env, hold_s=0)  # every set held: shares
        third.wait(timeout=30)
        assert got_third == "0"
        first.kill()
        first.wait(timeout=30)
        time.sleep(0.1)
        fourth, got_fourth = start_claimer("0|1", env, hold_s=0)
        fourth.wait(timeout=30)
        assert got_fourth == got_first  # the killed replica's claim ended with it
    finally:
        for process in (first, second):
            process.kill()
            process.wait(timeout=30)


def test_a_binding_without_alternatives_is_kept_and_a_claim_is_stable(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(core_claim, "_CLAIMED", {})
    assert core_claim.claim(None) is None
    assert core_claim.claim("0-3") == "0-3"
    first = core_claim.claim("2|3")
    assert first == "2" and core_claim.claim("2|3") == "2"
