"""vLLM plugin: an engine process killed mid-run leaves no POSIX semaphore in /dev/shm.

Python's multiprocessing names each lock's semaphore (``/dev/shm/sem.mp-*``) and, under
the ``spawn`` start method vLLM uses, unlinks the name only when the process exits
normally, or when its resource tracker outlives it. An engine-core process that is
killed with its replica (Ray kills a dead worker's children, the tracker included)
leaves both of its named semaphores behind, one per engine lifetime each (measured: 27
after ~15 engine cycles). Neither is ever shared with another process:

- the ``uni`` executor's ``shared_worker_lock``, for a worker that runs in the same
  process (``vllm.v1.executor.uniproc_executor``);
- tqdm's write lock, taken the first time vLLM shows a progress bar (weight loading).

Both become thread locks. The ``mp`` executor, whose lock its worker processes do
share, is left alone. vLLM loads this module in every process it starts (entry point
group ``vllm.general_plugins``, registered in ``pyproject.toml``).
"""

from __future__ import annotations

import threading


def register() -> None:
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    try:
        from vllm.v1.executor import uniproc_executor
    except ImportError:  # a vLLM without the module: nothing to do
        return
    uniproc_executor.Lock = threading.Lock  # type: ignore[attr-defined,assignment]
