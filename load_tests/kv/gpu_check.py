"""`make gpu-check`: what a GPU host shows of splitserve's GPU path, in one command.

    make gpu-check                                       (on a host with a GPU)
    scripts/loopback-netns .venv/bin/python -m load_tests.kv.gpu_check --device cpu

1. **The GPU**: what torch sees (its CUDA build, each device) and ``nvidia-smi``.
2. **The KV transfer in GPU memory**: ``load_tests.kv.kv_transfer_bench --device cuda``,
   NIXL VRAM to VRAM beside a device-to-device copy and the object store, 64 MiB to
   1 GiB; written to ``<out-dir>/gpu_kv_transfer.json``.
3. **The app end to end**, where vLLM's CUDA build is installed (``make setup
   DEVICE=cuda``): ``serve_configs/gpu.yaml`` with the builtin tiny model, on this host's
   GPUs (half of one each where there is one). A 700-token prompt is prefilled remotely
   and its KV must come over NIXL; its greedy answer must equal the same prompt's answer
   prefilled on the decode engine itself (``prompt_logprobs`` keeps a request there).

Exit status: 0 when every step that could run passed; 1 when one failed; 2 when the host
has no GPU (nothing checked). ``--device cpu`` runs the same steps in host memory with
the CPU config, which checks the check itself on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from load_tests.kv.kv_transfer_bench import Placement, gpu_count
from load_tests.kv.kv_transfer_bench import run as transfer_bench
from load_tests.systems.run_conditions import machine

CONFIGS = {"cuda": "serve_configs/gpu.yaml", "cpu": "serve_configs/default.yaml"}
LONG_PROMPT_TOKENS = 700  # over the configs' local_prefill_below_tokens (512)
ANSWER_TOKENS = 16


def app_overrides(device: str, gpus: int) -> dict[str, Any]:
    """The serve config's changes for the check: the builtin tiny model (no download),
    and on a GPU host each engine on a GPU of its own, or half of the only one."""
    model: dict[str, Any] = {
        "source": "builtin:tiny-llama",
        "served_name": "tiny-llama",
        "max_model_len": 2048,
    }
    if device == "cpu":
        return {"model": model}
    share = gpus < 2
    model["gpu_memory_utilization"] = 0.4 if share else 0.8
    pool = {
        "num_replicas": 1,
        "ray_actor_options": {"num_cpus": 1, "num_gpus": 0.5 if share else 1},
    }
    return {"model": model, "prefill": pool, "decode": pool}


def vllm_platform() -> str:
    """The platform of the installed vLLM ("cuda", "cpu", ...; "" when none is installed)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return ""
    return str(current_platform.device_type)


def gpu_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "devices": [torch.cuda.get_device_name(i) for i in range(gpu_count())],
    }
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,memory.total,driver_version"
        smi = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True
        )
        facts["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    return facts


def end_to_end(device: str, gpus: int) -> dict[str, Any]:
    """Start the app, send one long prompt remote and the same kept on decode: the KV
    must come over NIXL and the two greedy answers must be equal."""
    import httpx

    from load_tests.systems.local_app import LocalApp

    rng = random.Random(7)
    prompt = [rng.randrange(3, 1000) for _ in range(LONG_PROMPT_TOKENS)]
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": ANSWER_TOKENS, "temperature": 0}
    cpus = 2 if device == "cpu" else 4
    started = time.perf_counter()
    with LocalApp(CONFIGS[device], num_cpus=cpus, overrides=app_overrides(device, gpus)) as app:
        ready_s = time.perf_counter() - started
        remote = httpx.post(f"{app.url}/v1/completions", json=body, timeout=300)
        local = httpx.post(
            f"{app.url}/v1/completions", json={**body, "prompt_logprobs": 0}, timeout=300
        )
    for name, response in (("remote", remote), ("local", local)):
        if response.status_code != 200:
            raise CheckFailed(
                f"the {name} request answered {response.status_code}: {response.text}"
            )
    remote_body, local_body = remote.json(), local.json()
    report = remote_body.get("splitserve") or {}
    result = {
        "ready_s": round(ready_s, 1),
        "remote": {k: report.get(k) for k in ("decision", "kv_transport", "kv_bytes", "ttft_ms")},
        "local_decision": (local_body.get("splitserve") or {}).get("decision"),
        "answers_equal": remote_body["choices"][0]["text"] == local_body["choices"][0]["text"],
    }
    if report.get("kv_transport") != "nixl":
        raise CheckFailed(f"the long prompt's KV did not come over NIXL: {result}")
    if not result["answers_equal"]:
        raise CheckFailed(f"the NIXL-served answer differs from the local one: {result}")
    return result


class CheckFailed(RuntimeError):
    """A step ran and showed something wrong."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--sizes-mib", default="64,256,1024")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out-dir", default="load_tests/results")
    args = parser.parse_args()
    gpus = gpu_count() if args.device == "cuda" else 0
    if args.device == "cuda" and gpus == 0:
        print(
            "gpu-check: this host shows no GPU (torch.cuda.is_available() is False, or torch "
            "is a CPU build: `make setup DEVICE=cuda` installs the CUDA stack). Nothing checked."
        )
        return 2
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": machine()}
    if args.device == "cuda":
        report["gpu"] = gpu_facts()
        print("GPU:", json.dumps(report["gpu"]))
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    transfer = transfer_bench(sizes, args.repeats, placement=Placement(args.device, gpus))
    (out_dir / f"{args.device}_kv_transfer.json").write_text(json.dumps(transfer, indent=2))
    report["kv_transfer"] = transfer["rows"]
    for row in transfer["rows"]:
        print(
            f"{row['size_mib']:>5} MiB {row['transport']:<13} p50 {row['p50_ms']:>8.2f} ms "
            f"{row['gb_per_s']:>7.2f} GB/s {row['vs_memcpy']:>5.2f}x copy"
        )
    platform = vllm_platform()
    failed = False
    if platform != args.device:
        report["end_to_end"] = f"skipped: the installed vLLM runs on {platform or 'nothing'!r}"
        print("end to end:", report["end_to_end"])
    else:
        try:
            report["end_to_end"] = end_to_end(args.device, gpus)
        except CheckFailed as exc:
            report["end_to_end"] = f"failed: {exc}"
            failed = True
        print("end to end:", json.dumps(report["end_to_end"]))
    (out_dir / f"{args.device}_check.json").write_text(json.dumps(report, indent=2))
    print(
        f"gpu-check: {'FAILED' if failed else 'passed'}; results in {out_dir}/{args.device}_*.json"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
