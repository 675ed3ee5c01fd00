"""What a stopped app must not leave behind: Ray, engine and NIXL processes."""

from __future__ import annotations

import time

import psutil

LEFTOVERS = ("raylet", "gcs_server", "ray::", "VLLM::EngineCore", "default_worker.py")


def ours() -> list[psutil.Process]:
    """Ray and engine processes on this machine (a test session starts with none)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if any(mark in cmdline for mark in LEFTOVERS):
            found.append(process)
    return found


def wait_gone(timeout_s: float = 60) -> None:
    """Wait up to ``timeout_s`` for them to exit (a stopped cluster takes a moment)."""
    deadline = time.monotonic() + timeout_s
    while ours() and time.monotonic() < deadline:
        time.sleep(1)
