"""Binding a whole process to cores (`ingress.cpu_affinity`)."""

import json
import os
import signal
import subprocess
import sys

import pytest
from pydantic import ValidationError

from app.config import AppConfig
from app.cpu_affinity import parse_cores


def test_core_lists_parse():
    assert parse_cores("0") == {0}
    assert parse_cores("2-4") == {2, 3, 4}
    assert parse_cores("0,2-3") == {0, 2, 3}
    with pytest.raises(ValueError, match="backwards"):
        parse_cores("3-1")


@pytest.mark.parametrize("bad", ["", "all", "0-", "a,b", "1;2"])
def test_config_refuses_what_is_not_a_core_list(bad):
    with pytest.raises(ValidationError, match="cpu_affinity"):
        AppConfig.model_validate({"ingress": {"cpu_affinity": bad}})


PROBE = """
import json, os, threading
from app.cpu_affinity import pin_process
started = threading.Event(); stop = threading.Event()
def work():
    started.set(); stop.wait()
before = threading.Thread(target=work, daemon=True); before.start(); started.wait()
cores = pin_process({spec!r}, "ingress.cpu_affinity")
after = threading.Thread(target=work, daemon=True); after.start()
print(json.dumps({{
    "cores": sorted(cores),
    "threads": [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")],
}}))
stop.set()
"""


def _probe(spec: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(spec=spec)], capture_output=True, text=True, timeout=60
    )


def test_every_thread_is_bound_including_later_ones():
    core = min(os.sched_getaffinity(0))
    result = _probe(str(core))
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["cores"] == [core]
    assert len(shown["threads"]) >= 3
    assert all(threads == [core] for threads in shown["threads"]), shown


def test_cores_this_process_may_not_use_are_refused_naming_the_field():
    result = _probe("4096")
    assert result.returncode != 0
    assert "ingress.cpu_affinity='4096': this process may run on cores" in result.stderr


CHILDREN_PROBE = """
import json, os, subprocess, sys
from app.cpu_affinity import pin_children
code = (
    "import threading, time; "
    "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); "
    "print(1, flush=True); time.sleep(30)"
)
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
child.stdout.readline()  # its second thread runs
cores, pids = pin_children({spec!r}, "prefill.cpu_binding")
tasks = os.listdir(f"/proc/{{child.pid}}/task")
print(json.dumps({{
    "cores": sorted(cores),
    "pids": pids,
    "child": child.pid,
    "child_threads": [sorted(os.sched_getaffinity(int(t))) for t in tasks],
    "self": sorted(os.sched_getaffinity(0)),
}}))
child.kill()
"""


def test_children_are_bound_and_this_process_is_not():
    core = max(os.sched_getaffinity(0))
    result = subprocess.run(
        [sys.executable, "-c", CHILDREN_PROBE.format(spec=str(core))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["cores"] == [core]
    assert shown["pids"] == [shown["child"]]
    assert len(shown["child_threads"]) == 2
    assert all(threads == [core] for threads in shown["child_threads"]), shown
    assert shown["self"] == sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("binding", [None, "all", "nobind"])
def test_vllms_own_choices_bind_nothing(binding):
    from app.engine.binding import bind_engine

    bind_engine(binding, "decode")  # "all" / "nobind" are not core lists: parsing them raises


def test_vllm_servers_engine_processes_are_bound_and_the_server_is_not():
    """The compare harness binds vLLM's engine core and worker (the server's children) to
    the engine's cores, and leaves its API server where it was."""
    from load_tests.systems.vllm_server import bind_engine_processes

    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', "
        "'import threading, time; threading.Thread(target=time.sleep, args=(30,), daemon=True)"
        ".start(); print(1, flush=True); time.sleep(30)'], stdout=subprocess.PIPE, text=True); "
        "c.stdout.readline(); print(c.pid, flush=True); time.sleep(30)"
    )
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert server.stdout is not None
        child = int(server.stdout.readline())
        allowed = os.sched_getaffinity(0)
        core = min(allowed)
        assert bind_engine_processes(server.pid, str(core)) == [child]
        threads = os.listdir(f"/proc/{child}/task")
        assert len(threads) >= 2
        assert all(os.sched_getaffinity(int(t)) == {core} for t in threads)
        assert os.sched_getaffinity(server.pid) == allowed
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        server.kill()
        server.wait()
