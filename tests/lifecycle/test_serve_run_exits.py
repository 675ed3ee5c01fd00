"""`make run` stops cleanly: SIGTERM or Ctrl-C exits 0, prints no traceback, and leaves
no Ray, engine or NIXL process and no new file in /dev/shm behind (three cycles).

Runs as a pytest session of its own (`make test`): it starts and stops whole Ray
clusters through ``python -m deployments.serve_run``, the command ``make run`` runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.lifecycle.leftovers import ours, wait_gone

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.integration


def _shm() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.iterdir()} if shm.is_dir() else set()


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "serve_run exited before the app was ready"
        try:
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise AssertionError("the app did not become ready")


@pytest.mark.parametrize(
    ("config", "stop"),
    [
        ("default.yaml", signal.SIGTERM),  # prefill + decode engines, NIXL
        ("colocated.yaml", signal.SIGINT),
        ("colocated.yaml", signal.SIGTERM),
    ],
)
def test_serve_run_stops_cleanly(config: str, stop: signal.Signals, tmp_path: Path) -> None:
    assert not ours(), "another Ray cluster or engine runs on this machine"
    shm_before = _shm()
    log = tmp_path / "serve_run.log"
    # As under `make test &` or in CI: a background job starts with SIGINT ignored.
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    with log.open("wb") as out:
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "deployments.serve_run", f"serve_configs/{config}"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "RAY_DEDUP_LOGS": "0"},
            )
        finally:
            signal.signal(signal.SIGINT, inherited)
        try:
            _wait_ready("http://127.0.0.1:8000", process)
            body = {"model": "tiny-llama", "prompt": list(range(100, 400)), "max_tokens": 4}
            answer = httpx.post("http://127.0.0.1:8000/v1/completions", json=body, timeout=120)
            assert answer.status_code == 200
            process.send_signal(stop)
            rc = process.wait(timeout=120)
        finally:
            if process.poll() is None:  # failed: leave nothing for the next case
                for leftover in [process, *ours()]:
                    with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
                        leftover.kill()
    text = log.read_text(errors="replace")
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text and "SIGTERM received" not in text, text[-3000:]
    wait_gone()
    assert not ours(), [p.info["cmdline"] for p in ours()]
    assert _shm() - shm_before == set()
