"""Serve's replica log handler survives vLLM's logging set-up (deployments.serve_logging).

In a fresh interpreter each: vLLM's own ``configure_logging`` (the ``dictConfig`` that
``EngineArgs.create_engine_config`` applies) runs after a handler set up as Serve sets up
a replica's (a ``MemoryHandler`` of capacity 1 in front of a file).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import logging, logging.handlers, sys
from deployments.serve_logging import serve_logs_kept
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging

target = logging.FileHandler(sys.argv[1])
buffered = logging.handlers.MemoryHandler(1, target=target, flushLevel=logging.ERROR)
serve = logging.getLogger("ray.serve")
serve.propagate = False
serve.setLevel(logging.INFO)
serve.addHandler(buffered)
kept = sys.argv[2] == "kept"
if kept:
    with serve_logs_kept():
        configure_logging(LoggingConfig())
        serve.info("during the set-up")
else:
    configure_logging(LoggingConfig())
for i in range(100):
    serve.info("POST /v1/completions 200 %d", i)
print(len(buffered.buffer), buffered.target is target)
"""


def _run(tmp_path: Path, mode: str) -> tuple[str, list[str]]:
    log = tmp_path / f"{mode}.log"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), mode],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = log.read_text().splitlines() if log.exists() else []
    return done.stdout.split("\n")[-2], lines


def test_vllms_logging_set_up_takes_serves_log_file_and_keeps_every_record(tmp_path):
    # What the fix is for: without it, the handler loses its file and hoards records.
    printed, lines = _run(tmp_path, "bare")
    assert printed == "100 False"
    assert lines == []


def test_the_replica_keeps_its_log_file_and_holds_no_records(tmp_path):
    printed, lines = _run(tmp_path, "kept")
    assert printed == "0 True"
    assert lines[0] == "during the set-up"
    assert lines[-1] == "POST /v1/completions 200 99" and len(lines) == 101
