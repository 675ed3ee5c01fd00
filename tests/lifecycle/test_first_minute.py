"""The first minute, as a new user meets it: ``make run``, poll ``/health``, send requests
the instant it answers 200, then a closed loop and a burst.

- Until every pool has a warm replica, ``/health`` and the API answer 503 with
  ``Retry-After`` at once, on the direct-ingress port and through Serve's proxy.
- The moment ``/health`` answers 200, 8 concurrent requests prefilled remotely are all
  served, their KV moved over NIXL with no fallback, each TTFT within 3x the warm median.
- A closed loop at concurrency 16 (128 in / 128 out) gets no refusal.
- A burst of 300 streams: the admitted meet the TTFT budget (p99); each refusal comes
  within 1 s and carries ``Retry-After``. Then 400 through Serve's proxy (more than an
  ingress replica used to hold, beyond which requests waited in the proxy's queue unseen
  by admission): each is served whole or refused by admission with ``Retry-After``.
- Then hostile and broken clients, half on each port: 1,000 hostile bodies (malformed
  JSON: each a 4xx; fields of the wrong type or shape: a 4xx, or where vLLM's server
  accepts them too a 200 or admission's 503 with ``Retry-After``) and 200 uploads
  abandoned halfway; a valid request right after is answered 200 within 1 s on each
  port, and the ingress's admission gauges read 0 (no slot held).
- ``/metrics`` has the refusal counter by reason, and the counters the dashboard reads,
  at their first export.

Runs as a pytest session of its own (`make test`): it starts and stops a whole Ray
cluster through ``make run``, as a user does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from load_tests.client.aio_stream import session, stream_completion
from tests.integration.helpers import random_prompt
from tests.lifecycle import hostile_wave
from tests.lifecycle.leftovers import wait_gone

ROOT = Path(__file__).parents[2]
DIRECT = "http://127.0.0.1:8100"
PROXY = "http://127.0.0.1:8000"
TTFT_BUDGET_S = 5.0  # admission.ttft_budget_s, the default
pytestmark = pytest.mark.integration


async def _stream(client: Any, url: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """One streamed completion: status, seconds to the answer's head and first token,
    Retry-After, and the ``splitserve`` report of its usage event."""
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens}
    got = await stream_completion(client, url, {**body, "temperature": 0, "ignore_eos": True})
    return {
        "status": got.status,
        "head_s": got.head_s,
        "ttft_s": got.ttft_s,
        "retry_after": got.retry_after,
        "report": got.report,
        "tokens": int(got.usage.get("completion_tokens") or 0),
        "error": got.error,
    }


async def _politely(client: Any, url: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """:func:`_stream`, sent again after a 503's ``Retry-After`` (as the OpenAI SDK does, at
    most 20 times); ``shed``: how many times it was refused first, each with Retry-After
    (``bare``: refusals without it)."""
    shed = bare = 0
    for _ in range(20):
        result = await _stream(client, url, prompt, max_tokens)
        if result["status"] != 503:
            break
        shed += 1
        if not result["retry_after"]:
            bare += 1
            break
        await asyncio.sleep(float(result["retry_after"]))
    return {**result, "shed": shed, "bare": bare}


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _closed_loop(url: str, clients: int, total: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    counter = iter(range(total))
    async with session() as client:

        async def worker() -> None:
            for n in counter:
                results.append(await _politely(client, url, random_prompt(1000 + n, 128), 128))

        await asyncio.gather(*(worker() for _ in range(clients)))
    return results


async def _burst(url: str, streams: int, salt: int = 5000) -> list[dict[str, Any]]:
    async with session() as client:
        return list(
            await asyncio.gather(
                *(_stream(client, url, random_prompt(salt + n, 128), 64) for n in range(streams))
            )
        )


def _wait_ready(process: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """Poll /health on both ports every 0.5 s from the start; while it says 503, check
    that a request is refused at once. Returns what was seen."""
    seen: dict[str, Any] = {"not_ready": [], "refused_early": []}
    deadline = time.monotonic() + 900
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                health = client.get(f"{DIRECT}/health")
            except httpx.HTTPError:
                time.sleep(0.5)
                continue
            if health.status_code == 200:
                seen["health"] = health.json() if health.content else {}
                return seen
            seen["not_ready"].append((health.status_code, health.headers.get("retry-after")))
            if len(seen["refused_early"]) < 3:
                for url in (DIRECT, PROXY):
                    sent = time.perf_counter()
                    with contextlib.suppress(httpx.HTTPError):
                        body = {"model": "tiny-llama", "prompt": "hi", "max_tokens": 2}
                        early = client.post(f"{url}/v1/completions", json=body)
                        took = time.perf_counter() - sent
                        retry = early.headers.get("retry-after")
                        seen["refused_early"].append((url, early.status_code, retry, took))
            time.sleep(0.5)
    raise AssertionError("the app did not become ready")


def test_the_first_minute_from_make_run(tmp_path: Path) -> None:
    log = tmp_path / "make_run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "run"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RAY_DEDUP_LOGS": "0"},
            start_new_session=True,
        )
    try:
        seen = _wait_ready(process, log)
        # The instant it is ready: 8 concurrent requests, every prompt remote (>= 512).
        first = asyncio.run(_burst_of(8, 600, salt=0))
        # The next 8 as polite clients: on slow engines the first 8's drain rate may
        # shed a few of them for a moment (with Retry-After; the retry must be served).
        warm = asyncio.run(_burst_of(8, 600, salt=100, polite=True))
        loop = asyncio.run(_closed_loop(DIRECT, 16, 96))
        burst = asyncio.run(_burst(DIRECT, 300))
        # Through Serve's proxy, more streams than the ingress replica's old limit (256):
        # every request must reach admission, not wait in the proxy's queue unseen.
        proxy_burst = asyncio.run(_burst(PROXY, 400, salt=6000))
        hostile = asyncio.run(_hostile())
        after_hostile = [hostile_wave.valid_then_gauges(url, DIRECT) for url in (DIRECT, PROXY)]
        time.sleep(12)  # one metrics export interval
        metrics = httpx.get(f"{DIRECT}/metrics", timeout=30).text
        proxy_health = httpx.get(f"{PROXY}/health", timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        wait_gone()
    text = log.read_text(errors="replace")

    # Every check, each failure listed (a first minute fails in several ways at once).
    failed: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            failed.append(what)

    # Before ready: 503 + Retry-After on /health, and at once on the API, both ports.
    check(
        all(code == 503 and retry for code, retry in seen["not_ready"]),
        f"/health before ready: {seen['not_ready'][:5]}",
    )
    check(bool(seen["refused_early"]), "/health never said 'not ready': nothing to try early")
    for url, code, retry, took in seen["refused_early"]:
        check(code == 503 and bool(retry) and took < 1.0, f"early request {url}: {code} {took}")
    check(seen["health"].get("status") == "ok", f"/health when ready: {seen['health']}")
    check(proxy_health.status_code == 200, f"proxy /health: {proxy_health.status_code}")
    check("splitserve: ready after" in text, "make run never said the app was ready")

    # The 8 the instant it was ready: served, over NIXL, no fallback, TTFT as when warm.
    for result in first + warm:
        report = result["report"] or {}
        check(
            result["status"] == 200
            and report.get("kv_transport") == "nixl"
            and report.get("fallbacks") == [],
            f"a request right after ready: {result['status']} {report or result.get('error')}",
        )
    warm_ttfts = [r["ttft_s"] for r in warm if r["ttft_s"] is not None]
    first_ttfts = [r["ttft_s"] for r in first if r["ttft_s"] is not None]
    if warm_ttfts and first_ttfts:
        warm_median = statistics.median(warm_ttfts)
        check(
            max(first_ttfts) <= 3 * warm_median,
            f"TTFT right after ready {max(first_ttfts):.3f} s > 3 x warm {warm_median:.3f} s",
        )

    # A closed loop at 16 of polite clients: every request served. Where the engines are
    # slow (a CPU without AVX-512 prefills about 8x slower), admission may shed some of
    # the loop for a while, judging by the drain rate the 600-token bursts above left: each
    # such refusal must come at once with Retry-After, and the retry be served.
    failed_loop = [r for r in loop if r["status"] != 200 or r["bare"]]
    check(not failed_loop, f"closed loop at 16: {len(failed_loop)} of {len(loop)} not served")
    print(f"closed loop at 16: {sum(r['shed'] for r in loop)} refusals retried")

    # The burst: the admitted meet the budget; the rest are refused at once, with Retry-After.
    admitted = [r for r in burst if r["status"] == 200]
    shed = [r for r in burst if r["status"] != 200]
    check(bool(admitted), "the burst was refused whole")
    check(all(r["tokens"] == 64 for r in admitted), "an admitted stream was cut short")
    if admitted:
        p99 = _p99([r["ttft_s"] for r in admitted])
        check(p99 <= TTFT_BUDGET_S, f"burst: admitted TTFT p99 {p99:.2f} s > {TTFT_BUDGET_S} s")
    slow = [r for r in shed if not (r["status"] == 503 and r["retry_after"] and r["head_s"] < 1)]
    check(not slow, f"burst: {len(slow)} of {len(shed)} refusals late or bare: {slow[:2]}")
    # Through the proxy every request reaches admission: each is served whole or refused
    # by admission (503 with Retry-After), none refused bare or failed by the proxy. Its
    # timing is not asserted: the proxy's own CPU on two shared cores spreads 400 arrivals
    # over seconds (refusals measured at 1.2-6.6 s through it, 0.1 s direct).
    served = [r for r in proxy_burst if r["status"] == 200]
    check(all(r["tokens"] == 64 for r in served), "proxy burst: a stream was cut short")
    bare = [
        r
        for r in proxy_burst
        if r["status"] != 200 and not (r["status"] == 503 and r["retry_after"])
    ]
    check(not bare, f"proxy burst: {len(bare)} answers neither served nor refused: {bare[:2]}")
    refusals = sorted(r["head_s"] for r in proxy_burst if r["status"] != 200)
    if refusals:
        print(f"proxy burst: {len(served)} served, {len(refusals)} refused in "
              f"{refusals[0]:.2f}-{refusals[-1]:.2f} s")  # fmt: skip

    # Hostile and broken clients: malformed JSON a 4xx, odd fields a 4xx or what vLLM's
    # server answers them with; afterwards a valid request served at once on each port
    # and no admission slot held.
    def fits(answer: str) -> bool:
        kind, status = answer.split(" ", 1)
        if status.split()[0].startswith("4"):
            return True
        return kind == "fields" and status in ("200", "503 retry")

    wrong = {answer: n for answer, n in hostile.items() if not fits(answer)}
    check(not wrong, f"hostile bodies answered otherwise: {wrong}")
    print(f"1,000 hostile bodies: {hostile}")
    for url, after in zip((DIRECT, PROXY), after_hostile, strict=True):
        print(f"after the hostile wave, {url}: {after}")
        check(
            after["status"] == 200 and after["seconds"] < 1.0,
            f"a valid request after the hostile wave, {url}: {after}",
        )
        check(
            after["gauges"]
            == {"splitserve_admission_waiting": 0.0, "splitserve_admission_parsing": 0.0},
            f"admission gauges after the hostile wave: {after['gauges']}",
        )

    # Counters the dashboard reads exist from their first export, refusals by reason.
    for series in (
        'splitserve_admission_rejected_total{reason="predicted_wait"',
        'splitserve_admission_rejected_total{reason="not_ready"',
        "splitserve_kv_unserved_total{",
        'splitserve_migrations_total{cause="replica_died"',
        "vllm:num_preemptions_total{",
    ):
        check(_has(metrics, series), f"/metrics lacks {series}")
    assert not failed, "\n".join(failed)


async def _hostile() -> dict[str, int]:
    """1,000 hostile requests and 200 abandoned uploads, half on each port; the hostile
    requests' answers counted."""
    statuses: dict[str, int] = {}
    for url in (DIRECT, PROXY):
        for code, count in (await hostile_wave.malformed(url, 500)).items():
            statuses[code] = statuses.get(code, 0) + count
        await hostile_wave.abandoned(url, 100)
    return statuses


def _has(page: str, series: str) -> bool:
    """Whether ``page`` has a sample of ``series`` (``name{label="value"`` or ``name{``),
    whatever the order of its labels."""
    name, _, label = series.partition("{")
    for line in page.splitlines():
        if line.startswith(name + "{") and (not label or label.rstrip(",") in line):
            return True
    return False


async def _burst_of(
    count: int, length: int, salt: int, polite: bool = False
) -> list[dict[str, Any]]:
    """``count`` streams at once; ``polite``: each sent again after a 503's Retry-After."""
    send = _politely if polite else _stream
    async with session() as client:
        return list(
            await asyncio.gather(
                *(send(client, DIRECT, random_prompt(salt + n, length), 16) for n in range(count))
            )
        )
