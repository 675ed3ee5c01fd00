"""A NIXL READ over TCP completes while the side it reads from sits idle.

Over TCP the target's UCX worker serves the READ, so someone must drive UCX there. An
idle prefill engine makes no NIXL call; with the progress thread off such a READ never
completes and decode keeps the request's KV blocks. The plugin keeps the thread on,
pausing between polls (test_idle_engines.py checks that an idle engine stays off the CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.kv import nixl_progress
from app.kv.fallback import nixl_installed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not nixl_installed(), reason="NIXL is not installed"),
]

ROOT = Path(__file__).parents[2]
PAIR = [sys.executable, "-m", "tests.integration.nixl_pair"]


def _read_from_idle_target(folder: Path, env: dict[str, str], seconds: float) -> dict[str, Any]:
    environment = {**os.environ, "UCX_TLS": "tcp", **env}
    target = subprocess.Popen([*PAIR, "target", str(folder)], cwd=ROOT, env=environment)
    try:
        initiator = subprocess.run(
            [*PAIR, "initiator", str(folder), str(seconds)],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=seconds + 90,
        )
        lines = [line for line in initiator.stdout.splitlines() if line.startswith("{")]
        assert lines, initiator.stderr[-3000:]
        result: dict[str, Any] = json.loads(lines[-1])
        return result
    finally:
        (folder / "done").touch()
        target.wait(timeout=30)


def test_read_over_tcp_from_an_idle_target_completes(tmp_path):
    env = {nixl_progress.ENV: "1", nixl_progress.POLL_ENV: "5000"}
    outcome = _read_from_idle_target(tmp_path, env, seconds=20)
    assert outcome["state"] == "DONE", outcome
    assert outcome["copied"], outcome


def test_without_the_thread_the_same_read_stalls(tmp_path):
    """What the thread is for: the same READ does not finish while the target is idle."""
    outcome = _read_from_idle_target(tmp_path, {nixl_progress.ENV: "0"}, seconds=3)
    assert outcome["state"] == "PROC", outcome
