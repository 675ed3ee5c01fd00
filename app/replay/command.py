"""``splitserve replay``: its options and what it runs (:mod:`app.cli` dispatches here)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.planning.goodput import add_slo_options, slo_from_options


def add_replay_parser(commands: Any) -> argparse.ArgumentParser:
    """The ``replay`` subcommand on ``commands`` (argparse's subparsers)."""
    rp = commands.add_parser(
        "replay", help="replay a request trace, open loop, against any OpenAI-compatible server"
    )
    rp.add_argument(
        "--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8100"
    )
    rp.add_argument(
        "--trace",
        help="a CSV of TIMESTAMP,ContextTokens,GeneratedTokens "
        "(default: the Azure conversation trace of 2023 that ships with splitserve)",
    )
    rp.add_argument("--model", default="tiny-llama", help="the `model` field sent")
    rp.add_argument(
        "--start-s", type=float, default=0.0, help="window start, from the first arrival"
    )
    rp.add_argument("--duration-s", type=float, default=120.0, help="window length, trace time")
    rp.add_argument(
        "--rate-scale", type=float, default=1.0, help="arrivals sped up this many times"
    )
    rp.add_argument("--length-scale", type=float, default=1.0, help="prompt lengths times this")
    rp.add_argument(
        "--output-scale", type=float, help="output lengths times this (default: --length-scale)"
    )
    rp.add_argument(
        "--max-prompt-tokens", type=int, help="cap on a scaled prompt (the model's context)"
    )
    rp.add_argument("--vocab", type=int, default=1000, help="prompt token ids are drawn below this")
    add_slo_options(rp, ttft_ms=250.0, tpot_ms=50.0)
    rp.add_argument("--api-key", help="sent as `Authorization: Bearer`")
    rp.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the prompts' seed: a second run with the same seed sends the same prompts, "
        "which the server's prefix cache then answers; give each run against a running "
        "server a seed of its own",
    )
    rp.add_argument("--out", help="also write the report and every request's record (JSON)")

    return rp  # type: ignore[no-any-return]


def run_replay(args: argparse.Namespace) -> dict[str, Any]:
    """``splitserve replay``: the window's requests, sent open loop; the report."""
    import asyncio
    from dataclasses import asdict

    from app.replay.client import replay
    from app.replay.report import summary
    from app.replay.trace import BUILTIN, Window, read_trace, windowed

    window = Window(
        args.start_s,
        args.duration_s,
        args.rate_scale,
        args.length_scale,
        args.output_scale,
        args.max_prompt_tokens,
    )
    trace = args.trace or str(BUILTIN)
    requests = windowed(read_trace(trace), window)
    if not requests:
        raise ValueError(f"no request of {trace} arrives in the window {window.stated()}")
    limits, _ = slo_from_options(args)
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else None
    answers = asyncio.run(
        replay(
            args.url.rstrip("/"),
            args.model,
            requests,
            args.seed,
            args.vocab,
            headers,
            progress="replay",
        )
    )
    result = {"trace": trace, "url": args.url, **summary(answers, window, limits)}
    if args.out:
        records = [{**asdict(a), "ttft_s": a.ttft_s, "tpot_s": a.tpot_s} for a in answers]
        Path(args.out).write_text(json.dumps({**result, "records": records}, indent=2))
    return result
