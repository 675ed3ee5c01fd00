"""``splitserve profile`` with a real engine: the curves, and the crowded measurement with
a real neighbour engine on the other core, which is gone when the profile is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil


def _engines() -> set[int]:
    """Running processes of a vLLM engine or a neighbour on this host (vLLM names its
    engine core and worker processes ``VLLM::...``)."""
    found = set()
    for process in psutil.process_iter(["cmdline", "name", "status"]):
        line = " ".join(process.info["cmdline"] or []) + " " + (process.info["name"] or "")
        if process.info["status"] != "zombie" and (
            "VLLM::" in line or "app.planning.neighbour" in line
        ):
            found.add(process.pid)
    return found


def test_a_profile_measures_the_engine_alone_and_crowded(tmp_path: Path) -> None:
    before = _engines()
    out = tmp_path / "profile.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "app.cli", "profile",
            "--config", "serve_configs/colocated.yaml",
            "--prompt-lengths", "256", "512", "1024",
            "--repeats", "1",
            "--steps", "4",
            "--out", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,  # the pipes close when the profile and every engine it ran are gone
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    profile = json.loads(out.read_text())
    assert [x for x, _ in profile["prefill"]] == [256.0, 512.0, 1024.0]
    assert all(seconds > 0 for _, seconds in profile["prefill"] + profile["decode"])
    # Two cores here: the engine on core 0, a neighbour engine on core 1 while the
    # crowded points were taken, and nothing of either left after (the neighbour's
    # engine core and worker included: they once outlived it and held the pipes open).
    assert profile["conditions"]["crowded_by"] == "a neighbour engine on cores 1"
    assert profile["crowded_prefill"] >= 1.0 and profile["crowded_decode"] >= 1.0
    assert _engines() - before == set()
