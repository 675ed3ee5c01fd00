"""A neighbour engine for ``splitserve profile``: a second vLLM engine on the cores the
profiled one does not use, busy until stopped, so that the profile also measures the
engine as a layout of as many engines as cores runs it (no core spare for its own
scheduler process, the serving path or the OS, and the memory bus shared).

    python -m app.planning.neighbour --model PATH --cores 1

It prints ``ready`` once it has run a batch, then prefills and decodes batches back to
back until its standard input closes or it gets SIGTERM. It runs in a session of its own,
and it is stopped as a process group: vLLM's engine core and worker processes go with it
(a neighbour that only exited itself left them running).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import time
from types import TracebackType

from app.cpu_affinity import parse_cores

READY = "ready"


class Neighbour:
    """The neighbour's process: started on entry (waiting until it runs), stopped on exit."""

    def __init__(self, model: str, cores: str, kv_cache_gib: float, start_s: float = 600.0):
        self.model, self.cores, self.kv_cache_gib = model, cores, kv_cache_gib
        self.start_s = start_s
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Neighbour:
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, "--model", self.model, "--cores", self.cores],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib)},
            start_new_session=True,  # its engine's processes share its process group
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.start_s
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.process.stdout], [], [], 1.0)
            if readable and self.process.stdout.readline().strip() == READY:
                return self
            if self.process.poll() is not None:
                break
        self.__exit__(None, None, None)
        raise RuntimeError(
            f"the neighbour engine on cores {self.cores} did not start within "
            f"{self.start_s:.0f} s (exit code {self.process.returncode})"
        )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.process is None:
            return
        _signal_group(self.process.pid, signal.SIGTERM)  # the neighbour and its engine
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        deadline = time.monotonic() + 30
        while _group_alive(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        _signal_group(self.process.pid, signal.SIGKILL)  # whatever would not stop


def _signal_group(group: int, number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # else every member is gone
        os.killpg(group, number)


def _group_alive(group: int) -> bool:
    """Whether a member of the process group still runs (a zombie no one reaps does not)."""
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == group and process.info["status"] != "zombie":
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def other_cores(binding: str | None, cpus: int) -> str | None:
    """The cores a neighbour takes: those of this host not in ``binding`` (vLLM's
    ``VLLM_CPU_OMP_THREADS_BIND`` form: "0", "0-3", "0,2"), None where none is left or
    the binding is unknown."""
    if binding is None or cpus < 2:
        return None
    taken = parse_cores(binding)
    rest = [str(core) for core in range(cpus) if core not in taken]
    return ",".join(rest) or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--cores", required=True, help="VLLM_CPU_OMP_THREADS_BIND")
    args = parser.parse_args()
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = args.cores
    # Stopped as a group (see Neighbour), or on its own: its engine's processes go too.
    signal.signal(signal.SIGTERM, lambda *_: _stop_group())
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, max_model_len=2048, enable_prefix_caching=False)
    params = SamplingParams(max_tokens=32, ignore_eos=True, temperature=0)
    rng = random.Random(1)
    ready = False
    while True:
        batch = [
            {"prompt_token_ids": [rng.randrange(3, 1000) for _ in range(512)]} for _ in range(4)
        ]
        llm.generate(batch, params, use_tqdm=False)  # type: ignore[arg-type]
        if not ready:
            print(READY, flush=True)
            ready = True
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            _stop_group()  # the profiler has gone


def _stop_group() -> None:
    """End this neighbour and every process of its group (its engine core and worker)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's signal is for the others
    _signal_group(os.getpgid(0), signal.SIGTERM)
    os._exit(0)


if __name__ == "__main__":
    main()
