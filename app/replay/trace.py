"""A request trace in Azure's LLM inference trace format, and the window of it a replay sends.

The format (``TIMESTAMP,ContextTokens,GeneratedTokens``) is the Azure Public Dataset's;
the conversation trace of 2023 ships with the project (``app/replay/data``, CC-BY 4.0).
A replay takes a window of it (``start_s``, ``duration_s`` from the first arrival) and
scales it: arrivals sped up ``rate_scale`` times (the gaps divided), prompt and output
lengths multiplied by ``length_scale`` (each at least one token, prompts at most
``max_prompt_tokens``). Every figure a replay reports is stated with these factors.
"""

from __future__ import annotations

import csv
import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BUILTIN = Path(__file__).parent / "data" / "azure_conv_2023.csv"

# 2023's traces write 7 fractional digits and no zone, 2024's 6 digits and "+00:00";
# a whole second may have none.
STAMP = re.compile(r"^(\S+[ T][\d:]+)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)?$")


def parse_stamp(text: str) -> datetime:
    """A trace's TIMESTAMP as a naive UTC time: fractions cut to microseconds, a zone
    (``Z``, ``+00:00``) applied, so that rows with and without one compare."""
    found = STAMP.match(text.strip())
    if found is None:
        raise ValueError(f"TIMESTAMP {text!r} is not a date and time")
    whole, fraction, zone = found.groups()
    stamp = datetime.fromisoformat(
        whole + (f".{fraction[:6]:0<6}" if fraction else "") + (zone or "").replace("Z", "+00:00")
    )
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(UTC).replace(tzinfo=None)
    return stamp


@dataclass(frozen=True)
class TraceRequest:
    """One request: when it arrives (seconds from the window's start) and its lengths."""

    at_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Window:
    """Which part of a trace is replayed, and how it is scaled."""

    start_s: float = 0.0
    duration_s: float = 120.0
    rate_scale: float = 1.0
    length_scale: float = 1.0
    output_scale: float | None = None  # None: as ``length_scale``
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.start_s < 0 or self.duration_s <= 0:
            raise ValueError("a window starts at 0 s or later and lasts more than 0 s")
        if self.rate_scale <= 0 or self.length_scale <= 0 or (self.output_scale or 1) <= 0:
            raise ValueError("rate and length scales must be positive")

    def stated(self) -> dict[str, Any]:
        """The window and scales, as every report states them."""
        return asdict(self)

    def at_rate(self, rate: float) -> Window:
        """This window (a pass at rate scale 1) at rate scale ``rate``: ``rate`` times as
        many seconds of the trace, sped up as much, so that the pass lasts as long."""
        return replace(self, duration_s=self.duration_s * rate, rate_scale=rate)


def read_trace(path: str | Path = BUILTIN) -> list[tuple[float, int, int]]:
    """The trace's requests as (seconds since its first arrival, prompt, output), in
    arrival order. Raises ``ValueError`` naming the line of a malformed row."""
    rows: list[tuple[datetime, int, int]] = []
    with open(path, newline="", encoding="utf-8-sig") as file:
        reader = csv.DictReader(file)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: not an Azure LLM trace, it lacks {sorted(missing)}")
        for line, row in enumerate(reader, start=2):
            try:
                stamp = parse_stamp(row["TIMESTAMP"] or "")
                rows.append((stamp, int(row["ContextTokens"]), int(row["GeneratedTokens"])))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{line}: {exc}") from exc
    rows.sort(key=lambda r: r[0])
    if not rows:
        return []
    first = rows[0][0]
    return [((stamp - first).total_seconds(), p, o) for stamp, p, o in rows]


# A pass judges a profile by whether 90% of its requests meet it: with fewer than ten, a
# single late request fails it, so a pass that few requests arrive in is lengthened.
MIN_PASS_REQUESTS = 10
LONGEST_PASS = 4  # times the pass's own length, at most


def judged_window(
    rows: list[tuple[float, int, int]],
    at_one: Window,
    rate: float,
    least: int = MIN_PASS_REQUESTS,
    longest: int = LONGEST_PASS,
) -> Window | None:
    """The window of a pass at rate scale ``rate`` (``at_one`` is the pass at rate 1): as
    long as ``at_one`` says, or twice, or four times as long, the first that holds at
    least ``least`` requests; None when even ``longest`` times as long holds fewer (too
    few to judge: the pass is not run). The rate stays as stated: only the pass lasts
    longer."""
    window = at_one.at_rate(rate)
    times = 1
    while len(windowed(rows, window)) < least:
        if times * 2 > longest:
            return None
        times *= 2
        window = replace(window, duration_s=window.duration_s * 2)
    return window


def windowed(rows: list[tuple[float, int, int]], window: Window) -> list[TraceRequest]:
    """The requests of ``window``, their arrivals from its start divided by its rate
    scale and their lengths scaled."""
    output_scale = window.length_scale if window.output_scale is None else window.output_scale
    end = window.start_s + window.duration_s
    chosen = []
    for at_s, prompt, output in rows:
        if window.start_s <= at_s < end:
            scaled_prompt = max(1, round(prompt * window.length_scale))
            if window.max_prompt_tokens is not None:
                scaled_prompt = min(scaled_prompt, window.max_prompt_tokens)
            chosen.append(
                TraceRequest(
                    (at_s - window.start_s) / window.rate_scale,
                    scaled_prompt,
                    max(1, round(output * output_scale)),
                )
            )
    return chosen
