"""Fit the front end's CPU costs, from a run of their own, for the planner's front-end model.

    scripts/loopback-netns .venv/bin/python -m load_tests.planning.frontend_fit \
        [--config serve_configs/default.yaml] [--rounds 3] \
        [--out load_tests/results/frontend_fit.json]

Starts the app, then runs five closed-loop workloads (``--clients`` clients) and reads
the CPU seconds of the front-end processes (Serve's proxy, the ingress, the Prefill and
Decode replicas; not the engines) around each, with the requests, remote prefills and
content chunks the clients saw and the steps the engines took (vLLM's
``vllm:iteration_tokens_total`` count, one a step, from the app's ``/metrics``):

1. 128-token prompts (prefilled on decode, under ``router.local_prefill_below_tokens``),
   2 output tokens: mostly the per-request cost;
2. the same prompts, 128 output tokens: chunks;
3. 600-token prompts (prefilled remotely), 2 output tokens: the prefill hop;
4. the same, 128 output tokens;
5. workload 2 with twice the clients: about as many chunks in half the steps (a step
   serves twice the streams), which sets the per-step cost apart from the per-chunk one
   (five workloads, four costs: the residuals say how well the model fits).

Then solves CPU = requests x ``request_s`` + remote x ``remote_request_s`` + chunks x
``chunk_s`` + steps x ``step_s`` by least squares
(:class:`app.planning.frontend.FrontEndCost`), and the same for the engines' replicas'
CPU alone (their share: ``replica_request_s`` ...; the simulator runs each replica as a
process of its own beside the ingress), and prints JSON with the run conditions and
each workload's figures and residual. With ``--rounds N`` the five workloads run N times
(new prompts each round) and are fitted together; each round's own fit is reported
beside it (``by_round``): on a shared 2-vCPU machine two single-round fits 20 minutes
apart differed by 12-20%, enough to move a prediction by as much. It also fits the load
generator's own CPU (this process: ``client_request_s``, ``client_chunk_s``): a check of
the planner against load tests on the same machine must charge it too, since the clients
share the cores there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from load_tests.client.stream_bench import closed_loop
from load_tests.client.workloads import fixed
from load_tests.systems.local_app import LocalApp
from load_tests.systems.pool_usage import by_pool
from load_tests.systems.process_usage import app_processes, group_of
from load_tests.systems.run_conditions import machine

FRONT_END = ("Serve proxy", "Ingress replica", "Prefill replica", "Decode replica")
# (name, prompt tokens, output tokens, prefilled remotely, clients x --clients)
WORKLOADS = (
    ("local, 2 out", 128, 2, False, 1),
    ("local, 128 out", 128, 128, False, 1),
    ("remote, 2 out", 600, 2, True, 1),
    ("remote, 128 out", 600, 128, True, 1),
    ("local, 128 out, twice the clients", 128, 128, False, 2),  # steps apart from chunks
)
STEPS = "vllm:iteration_tokens_total_count"  # one observation per engine step
EXPORT_LAG_S = 2.5  # Ray exports metrics every second here (LocalApp below)


def front_end_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) each front-end group has used so far."""
    used = dict.fromkeys(FRONT_END, 0.0)
    for process in app_processes():
        group = group_of(process)
        if group not in used:
            continue
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used[group] += times.user + times.system
    return used


def engine_steps(url: str) -> float:
    """Steps every engine of the app has taken so far (all pools)."""
    found = by_pool(url, STEPS)
    if not found:
        raise RuntimeError(f"{url}/metrics has no {STEPS}: cannot count engine steps")
    return sum(total for total, _ in found.values())


async def workload(
    url: str, prompt: int, output: int, count: int, clients: int, seed: int
) -> dict[str, Any]:
    requests = fixed(random.Random(seed), count, input_len=prompt, output_len=output)
    await asyncio.sleep(EXPORT_LAG_S)  # the previous workload's steps exported
    steps_before = engine_steps(url)
    before = front_end_cpu_s()
    started, client_before = time.perf_counter(), time.process_time()
    async with httpx.AsyncClient(timeout=300) as client:
        timings, failures = await closed_loop(client, url, None, requests, clients)
    wall, client_cpu = time.perf_counter() - started, time.process_time() - client_before
    after = front_end_cpu_s()
    await asyncio.sleep(EXPORT_LAG_S)
    steps = engine_steps(url) - steps_before
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {failures[:3]}")
    remote = sum(1 for t in timings if (t.server or {}).get("disaggregated"))
    return {
        "requests": len(timings),
        "remote": remote,
        "chunks": sum(len(t.chunk_gaps) + 1 for t in timings),
        "steps": round(steps),
        "wall_s": round(wall, 2),
        "cpu_s": {g: round(after[g] - before[g], 3) for g in FRONT_END},
        "cpu_s_total": sum(after[g] - before[g] for g in FRONT_END),
        "client_cpu_s": round(client_cpu, 3),
    }


REPLICAS = ("Prefill replica", "Decode replica")


def fit(
    rows: list[dict[str, Any]], groups: tuple[str, ...] = FRONT_END
) -> tuple[np.ndarray, list[float]]:
    """(request_s, remote_request_s, chunk_s, step_s) of the CPU of ``groups`` together
    (default: the whole front end) by least squares, and each row's residual."""
    a = np.array([[r["requests"], r["remote"], r["chunks"], r["steps"]] for r in rows], dtype=float)
    b = np.array([sum(r["cpu_s"][g] for g in groups) for r in rows])
    costs, *_ = np.linalg.lstsq(a, b, rcond=None)
    costs = np.clip(costs, 0.0, None)
    return costs, [float(x) for x in b - a @ costs]


def fit_client(rows: list[dict[str, Any]]) -> np.ndarray:
    """The load generator's own (request_s, chunk_s): what a check on this machine's
    cores must add, as its clients share them (a user's clients run elsewhere)."""
    a = np.array([[r["requests"], r["chunks"]] for r in rows], dtype=float)
    costs, *_ = np.linalg.lstsq(a, np.array([r["client_cpu_s"] for r in rows]), rcond=None)
    clipped: np.ndarray = np.clip(costs, 0.0, None)
    return clipped


def named(
    costs: np.ndarray, client: np.ndarray, replica: np.ndarray | None = None
) -> dict[str, float]:
    """The fitted costs under the names :meth:`FrontEndCost.from_fit` reads; ``replica``:
    the engines' replicas' own share of the request, remote and chunk costs (each at
    most the whole; the step's cost is theirs in the model)."""
    found = {
        "request_s": round(float(costs[0]), 6),
        "remote_request_s": round(float(costs[1]), 6),
        "chunk_s": round(float(costs[2]), 6),
        "step_s": round(float(costs[3]), 6),
        "client_request_s": round(float(client[0]), 6),
        "client_chunk_s": round(float(client[1]), 6),
    }
    if replica is not None:
        for n, name in enumerate(("request_s", "remote_request_s", "chunk_s")):
            found[f"replica_{name}"] = round(min(float(replica[n]), found[name]), 6)
    return found


def by_round(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Each round's workloads fitted on their own: how far one round's fit can be trusted."""
    rounds = sorted({r["round"] for r in rows})
    fits = []
    for number in rounds:
        own = [r for r in rows if r["round"] == number]
        fits.append(named(fit(own)[0], fit_client(own), fit(own, REPLICAS)[0]))
    return fits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the five workloads this many times (new prompts each round) and fit "
        "them together; each round's own fit is reported too, to show the spread",
    )
    parser.add_argument("--out", default="load_tests/results/frontend_fit.json")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    rows = []
    # The fit counts CPU, not latency: admission refuses nothing (a slow host's remote
    # workloads would otherwise outwait the shipped budget and be refused).
    unrefused = {"ingress": {"admission": {"ttft_budget_s": 3600.0}}}
    with LocalApp(args.config, overrides=unrefused, metrics_report_interval_ms=1000) as app:
        asyncio.run(workload(app.url, 128, 4, 8, 1, seed=99))  # warm the path
        for number in range(args.rounds):
            for n, (name, prompt, output, remote, times) in enumerate(WORKLOADS):
                clients = args.clients * times
                seed = number * len(WORKLOADS) + n
                row = asyncio.run(workload(app.url, prompt, output, args.requests, clients, seed))
                if remote != (row["remote"] == row["requests"]):
                    raise RuntimeError(f"{name}: {row['remote']} of {row['requests']} went remote")
                rows.append({"workload": name, "round": number, **row})
    costs, residuals = fit(rows)
    result: dict[str, Any] = {
        "conditions": {**vars(args), "machine": machine()},
        "workloads": [
            {**r, "residual_s": round(e, 3)} for r, e in zip(rows, residuals, strict=True)
        ],
        **named(costs, fit_client(rows), fit(rows, REPLICAS)[0]),
    }
    if args.rounds > 1:
        result["by_round"] = by_round(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
