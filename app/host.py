"""The machine a measurement ran on, as every result records it."""

from __future__ import annotations

import platform


def cpu_model() -> str:
    """The CPU's model name, and whether it has AVX-512 (timings differ ~8x without)."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    name = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), ""
    )
    flags = next((line for line in lines if line.startswith("flags")), "")
    return f"{name or platform.machine()} ({'with' if 'avx512f' in flags else 'without'} AVX-512)"
