"""Why vLLM's own server ran slow in the compare harness: the same c=16 load, two
clients, two placements of vLLM's engine-core process.

    .venv/bin/python -m load_tests.vllm_baseline [--requests 128] [--cores 0]

Starts vLLM's OpenAI server on the builtin tiny model with its worker bound to
``--cores`` (``VLLM_CPU_OMP_THREADS_BIND``) and runs 128-in / 128-out at concurrency 16
with the compare harness's own client (httpx, ``load_tests.client.stream_bench``) and with
vLLM's benchmark client (``vllm.benchmarks.serve``, a client nobody here wrote). It does
so with the engine-core process floating, as vLLM leaves it, and bound to the worker's
cores, as ``load_tests.serving.compare`` now starts it (``load_tests/systems/vllm_server.py``), in the
order floating, bound, bound, floating. For each run: output tokens per second, TTFT
p50, and the CPU seconds per wall second of the client (this process) and of each
server process (API server, engine core, worker). Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.model.source import resolve_model
from load_tests.client.stream_bench import one_request
from load_tests.serving.compare import fixed_load
from load_tests.systems.run_conditions import machine
from load_tests.systems.vllm_server import bind_engine_processes, vllm_server


def _processes(port: int) -> dict[str, psutil.Process]:
    """vLLM's server processes by role: the one listening on ``port`` and its children."""
    server = next(
        psutil.Process(c.pid)
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
    )
    found = {"api_server": server}
    for child in server.children(recursive=True):
        name = " ".join(child.cmdline()) + child.name()
        if "EngineCore" in name:
            found["engine_core"] = child
        elif "Worker" in name or "VllmWorker" in name:
            found["worker"] = child
        else:
            found.setdefault("other", child)
    return found


def _cpu(processes: dict[str, psutil.Process]) -> dict[str, float]:
    out = {}
    for role, process in processes.items():
        try:
            times = process.cpu_times()
            out[role] = times.user + times.system
        except psutil.Error:
            out[role] = 0.0
    return out


def _vllm_bench(url: str, count: int, concurrency: int) -> dict[str, Any]:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    model = resolve_model("builtin:tiny-llama")
    args = parser.parse_args(
        [
            "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", model, "--served-model-name", "tiny-llama", "--tokenizer", model,
            "--dataset-name", "random", "--random-input-len", "128",
            "--random-output-len", "128", "--num-prompts", str(count),
            "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", "0",
            "--percentile-metrics", "ttft,tpot", "--disable-tqdm",
        ]
    )  # fmt: skip
    result = main(args)
    return {
        "failed": int(result.get("failed", 0)),
        "output_tok_per_s": float(result["output_throughput"]),
        "ttft_p50_ms": float(result["median_ttft_ms"]),
    }


def run_one(
    client: str, layout: str, url: str, port: int, args: argparse.Namespace
) -> dict[str, Any]:
    servers = _processes(port)
    me = psutil.Process()
    before, mine = _cpu(servers), me.cpu_times()
    started = time.perf_counter()
    if client == "harness":
        load = asyncio.run(fixed_load(url, args.requests, args.concurrency, 0))
        got = {
            "failed": load["failed"],
            "output_tok_per_s": load["output_tok_per_s"],
            "ttft_p50_ms": load["ttft_ms"]["p50"],
        }
    else:
        got = _vllm_bench(url, args.requests, args.concurrency)
    wall = time.perf_counter() - started
    after, mine_after = _cpu(servers), me.cpu_times()
    client_s = (mine_after.user + mine_after.system) - (mine.user + mine.system)
    return {
        "client": client,
        "engine_core": layout,
        **{k: round(v, 2) for k, v in got.items()},
        "wall_s": round(wall, 2),
        "cpu_per_wall_s": {
            "client": round(client_s / wall, 2),
            **{role: round((after[role] - before[role]) / wall, 2) for role in servers},
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cores", default="0")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--out", default="load_tests/results/vllm_baseline.json")
    args = parser.parse_args()
    runs = []
    with vllm_server(port=args.port, cores=args.cores, bind_engine=False) as url:
        server = _processes(args.port)["api_server"].pid
        as_vllm_left_it = _placement(server)
        asyncio.run(_warm(url))
        for number, layout in enumerate(("floating", "bound", "bound", "floating")):
            if layout == "bound":
                bind_engine_processes(server, args.cores)
            else:  # as vLLM leaves it: the worker's OpenMP threads alone are bound
                _restore(as_vllm_left_it)
            clients = ("harness", "vllm_bench") if number % 2 == 0 else ("vllm_bench", "harness")
            for client in clients:
                runs.append(run_one(client, layout, url, args.port, args))
                print(json.dumps(runs[-1]), flush=True)
    result = {"conditions": {**vars(args), "machine": machine()}, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def _placement(server_pid: int) -> dict[int, set[int]]:
    """The cores each thread of the server's child processes may run on, by thread id."""
    placement = {}
    for child in psutil.Process(server_pid).children(recursive=True):
        for thread in os.listdir(f"/proc/{child.pid}/task"):
            try:
                placement[int(thread)] = os.sched_getaffinity(int(thread))
            except ProcessLookupError:  # a thread that ended meanwhile
                continue
    return placement


def _restore(placement: dict[int, set[int]]) -> None:
    for thread, cores in placement.items():
        try:
            os.sched_setaffinity(thread, cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


async def _warm(url: str) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        for _ in range(3):
            await one_request(client, url, "tiny-llama", list(range(10, 138)), 8)


if __name__ == "__main__":
    main()
