"""``splitserve``: should you disaggregate, and with which prefill:decode ratio?

    splitserve kv --model builtin:tiny-llama --prompt-tokens 4096 --gbps 100
    splitserve advise --prompt-tokens 4096 --output-tokens 256 --ttft-ms 400 --tpot-ms 30 \
        --model path/to/config.json --accelerators 32 --network-gbps 400 --network rdma
    splitserve advise --result load_tests/results/loadgen.json --accelerators 2 ...
    splitserve advise --result load_tests/results/compare.json   # which layout won, and why
    splitserve advise --trace trace.csv --engine-profile profile.json   # winner per SLO profile
    splitserve profile --config serve_configs/default.yaml --out profile.json
    splitserve plan --profile profile.json --accelerators 2 --slo-ttft-ms 200 --slo-tpot-ms 20
    splitserve replay --url http://127.0.0.1:8100 --start-s 600 --duration-s 120 \
        --rate-scale 5 --length-scale 0.4 --output-scale 0.5   # the Azure chat trace

Every command prints a readable table, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.planning import assumptions
from app.planning.checks import Workload, advise
from app.planning.goodput import add_slo_options, slo_from_options
from app.planning.kv_size import KVShape, shape_from_model, transfer_seconds, wire_seconds
from app.planning.mix import DEFAULT_MIX, mix_lengths, parse_mix
from app.replay.command import add_replay_parser, run_replay


def _shape(args: argparse.Namespace) -> KVShape:
    return shape_from_model(args.model)


def _kv_bytes_per_token(args: argparse.Namespace) -> int:
    return _shape(args).bytes_per_token(args.tensor_parallel, args.kv_dtype)


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None


def workload_from_result(path: str, data: Any, args: argparse.Namespace) -> Workload:
    """A workload from a ``load_tests.client.loadgen`` result (its first run), read from
    ``path``."""
    try:
        run = data["runs"][0]
        ttft, e2e = run["ttft_ms"]["p50"], run["e2e_ms"]["p50"]
        prompt, output = run["prompt_tokens_mean"], run["output_tokens_mean"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(
            f"{path} is neither a load_tests.serving.compare result (rows per system) nor a "
            f"load_tests.client.loadgen result with runs[0].ttft_ms, e2e_ms, prompt_tokens_mean "
            f"and output_tokens_mean (missing {exc})"
        ) from None
    hit = run.get("prefix_hit_rate")
    return Workload(
        prompt_tokens=prompt,
        output_tokens=output,
        kv_bytes_per_token=_kv_bytes_per_token(args),
        decode_share=max(0.0, (e2e - ttft) / e2e) if e2e else 0.0,
        prefix_hit_rate=args.prefix_hit_rate if hit is None else float(hit),
        accelerators=args.accelerators,
        network_gbps=args.network_gbps,
        network=args.network,
    )


def workload_from_figures(args: argparse.Namespace) -> Workload:
    if args.prompt_tokens is None or args.output_tokens is None:
        raise ValueError("give --result, or --prompt-tokens and --output-tokens")
    if args.decode_share is not None:
        share = args.decode_share
    elif args.ttft_ms is not None and args.tpot_ms is not None:
        decode = max(args.output_tokens - 1, 0) * args.tpot_ms
        share = decode / (args.ttft_ms + decode) if args.ttft_ms + decode else 0.0
    else:
        raise ValueError("give --decode-share, or --ttft-ms and --tpot-ms to derive it")
    return Workload(
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        kv_bytes_per_token=_kv_bytes_per_token(args),
        decode_share=share,
        prefix_hit_rate=args.prefix_hit_rate,
        accelerators=args.accelerators,
        network_gbps=args.network_gbps,
        network=args.network,
    )


def cmd_kv(args: argparse.Namespace) -> dict[str, Any]:
    shape = _shape(args)
    per_token = shape.bytes_per_token(args.tensor_parallel, args.kv_dtype)
    nbytes = per_token * args.prompt_tokens
    return {
        "model": args.model,
        "shape": shape.__dict__,
        "tensor_parallel": args.tensor_parallel,
        "kv_dtype": args.kv_dtype,
        "bytes_per_token": per_token,
        "bytes_per_token_per_rank": shape.bytes_per_token_per_rank(
            args.tensor_parallel, args.kv_dtype
        ),
        "prompt_tokens": args.prompt_tokens,
        "bytes_per_request": nbytes,
        "link_gbps": args.gbps,
        "wire_ms": wire_seconds(nbytes, args.gbps) * 1000,
        "rdma_ms": transfer_seconds(nbytes, args.gbps, "rdma") * 1000,
        "tcp_ms": transfer_seconds(nbytes, args.gbps, "tcp") * 1000,
    }


def cmd_advise(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    if args.trace:
        from app.planning import trace_advice
        from app.replay.trace import Window

        if not args.engine_profile:
            raise ValueError("--trace needs --engine-profile (what `splitserve profile` wrote)")
        window = Window(
            args.start_s,
            args.duration_s,
            1.0,
            args.length_scale,
            args.output_scale,
            args.max_prompt_tokens,
        )
        by_trace = trace_advice.advise_from_files(
            args.trace,
            args.engine_profile,
            window,
            args.local_prefill_below_tokens,
            args.frontend,
            args.cores,
        )
        return by_trace, trace_advice.table(by_trace)
    defaulted = assumptions.fill_advise_defaults(args)  # and say so under the table
    if args.result:
        from app.planning import measured

        data = _read_json(args.result)
        if measured.is_compare_result(data):
            answer = measured.verdict(data)
            return answer, measured.table(answer)
        workload = workload_from_result(args.result, data, args)
    else:
        workload = workload_from_figures(args)
    advice = advise(workload)
    assumed = assumptions.for_advice(args.model, workload, defaulted)
    answer = {"workload": workload.__dict__, **advice.to_json(), "assumes": assumed}
    return answer, "\n".join([advice.table(), *assumptions.lines(assumed)])


def cmd_profile(args: argparse.Namespace) -> dict[str, Any]:
    from app.config import AppConfig, serve_file_args
    from app.planning.profiler import PROMPT_LENGTHS, measure

    config = AppConfig.model_validate(serve_file_args(args.config))
    lengths = tuple(args.prompt_lengths) if args.prompt_lengths else PROMPT_LENGTHS
    profile = measure(
        config,
        prompt_lengths=lengths,
        repeats=args.repeats,
        steps=args.steps,
        crowded=not args.alone,
    )
    profile.save(args.out)
    return {
        "written": args.out,
        "prefill": profile.prefill,
        "decode": profile.decode,
        "decode_context_token_s": profile.decode_context_token_s,
        "crowded_prefill": profile.crowded_prefill,
        "crowded_decode": profile.crowded_decode,
    }


def cmd_plan(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from app.planning.engine_profile import EngineProfile
    from app.planning.frontend import FrontEndCost
    from app.planning.planner import plan

    profile = EngineProfile.load(args.profile)
    if args.overhead_ms is not None:
        profile.overhead_s = args.overhead_ms / 1000
    if args.disaggregated_overhead_ms is not None:
        profile.disaggregated_overhead_s = args.disaggregated_overhead_ms / 1000
    lengths = mix_lengths(parse_mix(args.mix), args.requests, args.seed)
    kv_bytes = _kv_bytes_per_token(args) if args.link_gbps else 0
    slo, target = slo_from_options(args)
    frontend = FrontEndCost.from_fit(args.frontend) if args.frontend else None
    plans = plan(
        profile,
        args.accelerators,
        lengths,
        slo.ttft_s,
        slo.tpot_s,
        kv_bytes,
        args.link_gbps,
        args.seconds,
        target,
        frontend,
        args.cores,
        tuple(args.local_prefill_below_tokens),
    )
    rows = [
        {
            "topology": p.topology.name,
            "accelerators": p.topology.accelerators,
            "goodput_req_per_s": round(p.goodput, 3),
            "goodput_per_accelerator": round(p.per_accelerator, 3),
            "tried": [[round(r, 3), round(a, 3)] for r, a in p.tried],
        }
        for p in plans
    ]
    lines = [f"{'topology':<16} {'goodput req/s':>14} {'per accelerator':>16}"]
    lines += [
        f"{r['topology']:<16} {r['goodput_req_per_s']:>14.2f} {r['goodput_per_accelerator']:>16.2f}"
        for r in rows
    ]
    lines.append(f"\nbest: {rows[0]['topology']} (SLO TTFT <= {args.slo_ttft_ms:g} ms, "
                 f"TPOT <= {args.slo_tpot_ms:g} ms, >= {target:.0%} of requests)")  # fmt: skip
    assumed = assumptions.for_plan(
        args.profile, profile.conditions, args.model, kv_bytes, args.link_gbps,
        args.accelerators, args.frontend, args.cores,
    )  # fmt: skip
    lines += assumptions.lines(assumed)
    answer = {"plans": rows, "mix": args.mix, "profile": args.profile, "assumes": assumed}
    return answer, "\n".join(lines)


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="builtin:tiny-llama",
        help="config.json, a model directory, a builtin model, or a serve config YAML (its "
        "model.source) (default: %(default)s)",
    )
    parser.add_argument("--tensor-parallel", type=int, default=1)
    parser.add_argument("--kv-dtype", default="auto", help="auto (the model's), fp8, bf16, ...")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splitserve", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    kv = commands.add_parser("kv", help="KV bytes per token / request and transfer time")
    _model_options(kv)
    kv.add_argument("--prompt-tokens", type=int, default=4096)
    kv.add_argument("--gbps", type=float, default=100.0, help="link rate, Gbit/s")

    adv = commands.add_parser("advise", help="the five checks: should you disaggregate?")
    _model_options(adv)
    adv.add_argument(
        "--result",
        help="a measured result instead of figures: what `make bench-compare` writes "
        "(load_tests.serving.compare: which layout won at the SLO, and why) or a "
        "load_tests.client.loadgen "
        "result (its workload, through the five checks)",
    )
    adv.add_argument(
        "--trace",
        help="a trace (Azure's format): which layout of two engines serves its window best "
        "under each SLO profile, simulated with --engine-profile's costs",
    )
    adv.add_argument("--engine-profile", help="with --trace: what `splitserve profile` wrote")
    adv.add_argument("--start-s", type=float, default=600.0, help="with --trace: window start")
    adv.add_argument(
        "--duration-s",
        type=float,
        default=60.0,
        help="with --trace: seconds each simulated pass lasts (at rate scale r, r times as "
        "much of the trace)",
    )
    adv.add_argument("--length-scale", type=float, default=1.0, help="with --trace")
    adv.add_argument("--output-scale", type=float, help="with --trace")
    adv.add_argument("--max-prompt-tokens", type=int, default=15360, help="with --trace")
    adv.add_argument(
        "--local-prefill-below-tokens",
        type=int,
        default=512,
        help="with --trace: the default layout's bound (serve_configs/default.yaml's)",
    )
    adv.add_argument(
        "--frontend",
        help="with --trace: the serving path's CPU costs (load_tests.planning.frontend_fit's "
        "JSON), "
        "charged on --cores shared with the engines",
    )
    adv.add_argument("--cores", type=int, default=0, help="with --trace and --frontend")
    adv.add_argument("--prompt-tokens", type=float)
    adv.add_argument("--output-tokens", type=float)
    adv.add_argument("--decode-share", type=float, help="share of request time decoding")
    adv.add_argument("--ttft-ms", type=float, help="with --tpot-ms: derives the decode share")
    adv.add_argument("--tpot-ms", type=float)
    adv.add_argument("--prefix-hit-rate", type=float, default=0.0)
    adv.add_argument("--accelerators", type=int, help="default 8, said in the output")
    adv.add_argument("--network-gbps", type=float, help="default 100, said in the output")
    adv.add_argument("--network", choices=("rdma", "tcp"), help="default rdma, said so")

    prof = commands.add_parser("profile", help="measure one engine's costs on this machine")
    prof.add_argument("--config", default="serve_configs/default.yaml")
    prof.add_argument("--out", default="load_tests/results/engine_profile.json")
    prof.add_argument("--repeats", type=int, default=3)
    prof.add_argument("--steps", type=int, default=32)
    prof.add_argument(
        "--prompt-lengths",
        type=int,
        nargs="+",
        help="prompt lengths the prefill curve is measured at (default 16 to 1,536 tokens; "
        "give the longest a workload has, as the curve is extended linearly beyond them)",
    )
    prof.add_argument(
        "--alone",
        action="store_true",
        help="skip the crowded measurement (a neighbour engine on the cores the engine is "
        "not bound to, as in a layout of as many engines as cores)",
    )

    pl = commands.add_parser("plan", help="best prefill:decode ratio for goodput per engine")
    _model_options(pl)
    pl.add_argument("--profile", required=True, help="JSON from `splitserve profile`")
    pl.add_argument("--accelerators", type=int, required=True)
    pl.add_argument("--mix", default=DEFAULT_MIX, help="prompt:output:share,... (%(default)s)")
    pl.add_argument("--requests", type=int, default=200, help="fewest simulated per rate")
    pl.add_argument("--seconds", type=float, default=60.0, help="simulated arrivals per rate")
    add_slo_options(pl, ttft_ms=200.0, tpot_ms=20.0)
    pl.add_argument("--overhead-ms", type=float, help="serving path per request (colocated)")
    pl.add_argument("--disaggregated-overhead-ms", type=float, help="extra per disagg. request")
    pl.add_argument("--link-gbps", type=float, default=0.0, help="KV link; 0: free")
    pl.add_argument(
        "--local-prefill-below-tokens",
        type=int,
        nargs="+",
        default=[0],
        metavar="TOKENS",
        help="model each split with these thresholds: prompts shorter are prefilled on "
        "decode, as router.local_prefill_below_tokens does (the default config: 512); "
        "0: every prompt remote (default: 0)",
    )
    pl.add_argument(
        "--frontend",
        help="the serving path's CPU costs (JSON from load_tests.planning.frontend_fit): "
        "modelled as "
        "a server every request and chunk visits",
    )
    pl.add_argument(
        "--cores",
        type=int,
        default=0,
        help="cores the engines and the front end share; 0: each engine has its own and "
        "the front end runs beside them",
    )
    pl.add_argument("--seed", type=int, default=0)

    rp = add_replay_parser(commands)

    for sub in (kv, adv, prof, pl, rp):
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "advise":
            result, table = cmd_advise(args)
        elif args.command == "plan":
            result, table = cmd_plan(args)
        elif args.command == "replay":
            result = run_replay(args)
            table = json.dumps(result, indent=2)
        elif args.command == "kv":
            result = cmd_kv(args)
            table = "\n".join(f"{k:<26} {v}" for k, v in result.items())
        else:
            result = cmd_profile(args)
            table = json.dumps(result, indent=2)
    except (ValueError, FileNotFoundError) as exc:
        print(f"splitserve {args.command}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
