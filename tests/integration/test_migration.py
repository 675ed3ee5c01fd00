"""A stream survives the death of its decode replica, or of its engine: the request moves.

Against the real app (one decode replica, so each move waits for Serve to replace it):
the replica killed through Ray's API after 20 of 200 tokens, then the engine process
alone killed. Each time the client's greedy text equals an uninterrupted run's, usage
counts the whole answer, the ``splitserve`` field lists the move, and afterwards no KV
block is held and no payload file is left.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
import ray

from app.kv import object_store
from tests.integration.faults import (
    assert_no_kv_held,
    call,
    check_migrated,
    decode_replica_actor,
    reference_run,
    stream_with_a_kill,
    wait_healthy,
    wait_processes_gone,
)
from tests.integration.helpers import random_prompt


def _no_leak(pids: list[int]) -> None:
    wait_processes_gone(pids)
    wait_healthy("Decode")
    assert_no_kv_held("Prefill", "Decode")
    assert not list(object_store.payload_dir().glob(f"{object_store.PREFIX}*"))


@pytest.mark.kills_replica
def test_a_stream_outlives_its_decode_replica(apps, http):
    prompt = random_prompt(8100, 300)  # prefilled remotely, its KV moved over NIXL
    reference = reference_run(http, apps.disaggregated, prompt)
    pids = [int(p) for p in call("Decode", "process_info")["children"]]
    replica = decode_replica_actor()
    started = time.monotonic()
    events = stream_with_a_kill(
        apps.disaggregated, prompt, lambda: ray.kill(replica, no_restart=True)
    )
    check_migrated(events, reference, prompt, "replica_died", exact=False)
    assert time.monotonic() - started < 300
    _no_leak(pids)


@pytest.mark.kills_replica
def test_a_stream_outlives_its_decode_engine(apps, http):
    prompt = random_prompt(8200, 300)
    reference = reference_run(http, apps.disaggregated, prompt)
    info = call("Decode", "process_info")
    engines = [
        pid
        for pid in info["children"]
        if "EngineCore" in " ".join(psutil.Process(pid).cmdline()) + psutil.Process(pid).name()
    ]
    assert len(engines) == 1, info
    events = stream_with_a_kill(
        apps.disaggregated, prompt, lambda: os.kill(engines[0], signal.SIGKILL)
    )
    check_migrated(events, reference, prompt, "engine_died", exact=False)
    _no_leak([int(p) for p in info["children"]])
