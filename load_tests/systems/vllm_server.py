"""vLLM's own OpenAI server on the builtin model, as a context manager: the peer the
integration tests compare the API with, and the compare harness's baseline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from app.cpu_affinity import pin_children
from app.model.source import resolve_model

MAX_MODEL_LEN = 2048  # room for the mix's 1536-token prompts


@contextmanager
def vllm_server(
    port: int = 8011,
    cores: str = "0",
    extra_args: list[str] | None = None,
    bind_engine: bool = True,
    max_model_len: int = MAX_MODEL_LEN,
) -> Iterator[str]:
    """vLLM's OpenAI server on the builtin model, engine bound to ``cores``; ``extra_args``
    are more of its flags.

    vLLM's CPU platform binds only its worker's OpenMP threads (``VLLM_CPU_OMP_THREADS_BIND``);
    its engine-core process floats, and it busy-polls the worker's shared-memory queue, so
    on a core of its own it takes most of that core from the API server and the client.
    With ``bind_engine`` (the default) every process the server spawned (engine core,
    worker) is bound to ``cores`` once it is up, as splitserve binds its engines
    (:mod:`app.engine.binding`); docs/performance.md, section 14, measures both.

    It runs in a process group of its own, stopped as a whole: the engine core it
    spawns goes with it.
    """
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": cores,
        "VLLM_NO_USAGE_STATS": "1",
    }
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", resolve_model("builtin:tiny-llama"), "--served-model-name", "tiny-llama",
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len),
        "--enforce-eager", "--enable-prefix-caching", *(extra_args or []),
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise RuntimeError("vLLM's server exited during start-up")
            time.sleep(0.5)
        else:
            raise RuntimeError("vLLM's server did not become healthy in 180 s")
        if bind_engine:
            bind_engine_processes(process.pid, cores)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def bind_engine_processes(server_pid: int, cores: str) -> list[int]:
    """Bind every thread of every process vLLM's server ``server_pid`` spawned (its engine
    core and worker; not the API server itself) to those of ``cores`` this process may use;
    returns their PIDs."""
    return pin_children(cores, "vllm_server cores", parent=server_pid)[1]
