"""Priority classes under overload: does the high class keep its SLO while the low class
absorbs the refusals and the wait?

    make bench-priority   (scripts/loopback-netns .venv/bin/python -m
                           load_tests.reliability.priority_bench [--load 2] [--seconds 40])

Starts the default app with two classes (``interactive``: priority 0, all of admission's
limits; ``batch``: priority 10, half of them), every prompt prefilled remotely, and
measures its capacity C as :mod:`load_tests.reliability.overload` does (a closed loop of
16 clients, 256 prompt / 64 output tokens). Then Poisson arrivals at ``--load`` x C for
``--seconds``, each request of either class with even odds, and per class: how many were
admitted (200) and refused (503, by rule), the admitted TTFT p50/p99 against the SLO
(admission's budget, ``ingress.admission.ttft_budget_s``), and the share meeting it. The
same arrivals follow against the app with no classes (``--no-baseline`` skips it), so the
classes' effect is read in one run.

Writes JSON with the run conditions (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from app.config import AppConfig
from load_tests.client import aio_stream
from load_tests.client.stats import summarize
from load_tests.reliability.overload import OUTPUT, PROMPT, _outcome, _why, arrivals, capacity
from load_tests.systems.local_app import LocalApp, config_args, merge
from load_tests.systems.run_conditions import machine

CLASSES = {
    "classes": {
        "interactive": {"priority": 0},
        "batch": {"priority": 10, "admission_share": 0.5},
    },
    "default_class": "interactive",
}
NAMES = ("interactive", "batch")


async def mixed_arrivals(url: str, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """Poisson arrivals at ``rate``, each of a class drawn with even odds (the same draws
    for the same seed); per class, each answer's status and each admitted TTFT."""
    import aiohttp

    rng = random.Random(seed)
    classes = random.Random(seed + 1)
    found: dict[str, dict[str, Any]] = {n: {"statuses": {}, "ttft_s": []} for n in NAMES}
    async with aio_stream.session() as client:

        async def send(at: float, prompt: list[int], max_tokens: int) -> None:
            name = NAMES[classes.random() < 0.5]
            body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens}
            body |= {"temperature": 0, "ignore_eos": True}
            try:
                got = await aio_stream.stream_completion(
                    client, url, body, since=at, headers={"x-priority-class": name}
                )
            except aiohttp.ClientError as exc:
                key = type(exc).__name__
            else:
                key = _outcome(got)
                if key == "200" and got.ttft_s is not None:
                    found[name]["ttft_s"].append(got.ttft_s)
                elif got.status == 503:
                    key = f"503{_why(got.error)}"
            statuses = found[name]["statuses"]
            statuses[key] = statuses.get(key, 0) + 1

        sent = await arrivals(rate, seconds, rng, send)
    found["sent"] = sent  # type: ignore[assignment]
    return found


def per_class(found: dict[str, Any], budget_s: float) -> dict[str, Any]:
    report = {}
    for name in NAMES:
        statuses = found[name]["statuses"]
        ttft = found[name]["ttft_s"]
        sent = sum(statuses.values())
        admitted = statuses.get("200", 0)
        quantiles = summarize(ttft, 1000) if ttft else {}
        report[name] = {
            "sent": sent,
            "statuses": statuses,
            "admitted_share": round(admitted / max(sent, 1), 3),
            "admitted_ttft_p50_ms": round(quantiles.get("p50", 0.0), 1),
            "admitted_ttft_p99_ms": round(quantiles.get("p99", 0.0), 1),
            "admitted_meeting_slo": round(sum(t <= budget_s for t in ttft) / max(len(ttft), 1), 3),
        }
    return report


def run(config: Path, classes: dict[str, Any] | None, load: float, seconds: float, seed: int,
        rate: float | None) -> dict[str, Any]:  # fmt: skip
    overrides: dict[str, Any] = {"router": {"local_prefill_below_tokens": 0}}
    if classes is not None:
        overrides["priority"] = classes
    args = merge(config_args(config), overrides)
    budget_s = AppConfig.model_validate(args).ingress.admission.ttft_budget_s
    with LocalApp(config, overrides=overrides) as app:
        rng = random.Random(seed)
        # Warm the engines' shapes before the capacity run.
        asyncio.run(capacity(app.url, rng, clients=4, count=8))
        measured = rate or asyncio.run(capacity(app.url, rng))
        started = time.perf_counter()
        found = asyncio.run(mixed_arrivals(app.url, load * measured, seconds, seed))
        wall = time.perf_counter() - started
    return {
        "classes": classes,
        "capacity_rps": round(measured, 3),
        "offered_rps": round(load * measured, 3),
        "sent": found["sent"],
        "wall_s": round(wall, 1),
        "slo_ttft_s": budget_s,
        "by_class": per_class(found, budget_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="serve_configs/default.yaml")
    parser.add_argument("--load", type=float, default=2.0, help="offered load, x capacity")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--out", default="load_tests/results/priority_bench.json")
    args = parser.parse_args()
    config = Path(args.config)
    result: dict[str, Any] = {
        "machine": machine(),
        "load": args.load,
        "seconds": args.seconds,
        "prompt_tokens": PROMPT,
        "output_tokens": OUTPUT,
    }
    result["with_classes"] = run(config, CLASSES, args.load, args.seconds, args.seed, None)
    if not args.no_baseline:
        # The same offered rate, so the two runs see the same arrivals.
        rate = result["with_classes"]["capacity_rps"]
        result["without_classes"] = run(config, None, args.load, args.seconds, args.seed, rate)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
