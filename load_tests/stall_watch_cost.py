"""What migration's stall watchdog costs per streamed chunk (no Ray, no engine).

    .venv/bin/python -m load_tests.stall_watch_cost [--chunks 100000] [--rounds 5]

Reads ``--chunks`` chunks from an async generator that yields to the loop once per chunk,
three ways, in turn, ``--rounds`` times: bare ``anext``; an ``asyncio.timeout`` around
each wait (how migration timed a stream before); and
:class:`app.flow.migration.StallWatch` (one timer per stream). Prints the median
microseconds per chunk of each, and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator

from app.flow.migration import StallWatch
from load_tests.systems.run_conditions import machine

LIMIT_S = 10.0


async def _stream(count: int) -> AsyncIterator[int]:
    for number in range(count):
        await asyncio.sleep(0)
        yield number


async def _per_chunk_us(kind: str, count: int) -> float:
    chunks = aiter(_stream(count))
    watch = StallWatch(LIMIT_S)
    started = time.perf_counter()
    for _ in range(count):
        if kind == "timeout_per_chunk":
            async with asyncio.timeout(LIMIT_S):
                await anext(chunks)
        elif kind == "stall_watch":
            await watch.next(chunks)  # type: ignore[arg-type]
        else:
            await anext(chunks)
    watch.stop()
    return (time.perf_counter() - started) / count * 1e6


async def _measure(count: int, rounds: int) -> dict[str, float]:
    kinds = ("bare", "timeout_per_chunk", "stall_watch")
    runs: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(rounds):
        for kind in kinds:
            runs[kind].append(await _per_chunk_us(kind, count))
    return {kind: round(statistics.median(values), 2) for kind, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(_measure(args.chunks, args.rounds))
    print(json.dumps({"machine": machine(), "median_us_per_chunk": result, **vars(args)}))


if __name__ == "__main__":
    main()
