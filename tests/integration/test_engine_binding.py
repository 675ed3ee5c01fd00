"""Each engine computes on its pool's `cpu_binding` cores (default app: prefill 0, decode 1).

vLLM 0.32 does not apply the binding with the `uni` executor, and its NIXL connector moves
the model's thread to the last core, which put both engines on core 1 before the replica
bound them (app.engine.binding.bind_engine).
"""

import os

import pytest

from tests.integration.faults import call


def _thread_cores(pid: int) -> dict[int, set[int]]:
    found = {}
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(thread)] = os.sched_getaffinity(int(thread))
        except ProcessLookupError:
            continue
    return found


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell apart")
@pytest.mark.parametrize(("deployment", "core"), [("Prefill", 0), ("Decode", 1)])
def test_every_engine_thread_runs_on_its_pools_core(apps, deployment, core):
    children = call(deployment, "process_info")["children"]
    assert children, f"{deployment} replica started no engine process"
    threads = {pid: _thread_cores(pid) for pid in children}
    # The engine core runs dozens of threads; other children (a multiprocessing helper)
    # may run one.
    assert max(len(cores) for cores in threads.values()) > 10, threads
    for pid, cores in threads.items():
        assert all(found == {core} for found in cores.values()), (deployment, pid, cores)
