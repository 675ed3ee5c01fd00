"""KV transport benchmark: NIXL vs the Ray object store vs a plain memcpy, side by side.

    scripts/loopback-netns .venv/bin/python -m load_tests.kv.kv_transfer_bench   (or: make bench-kv)
    .venv/bin/python -m load_tests.kv.kv_transfer_bench --device cuda         (GPU memory)

Two Ray actors stand in for a prefill and a decode replica, each pinned to its own core
(``--device cuda``: each with its buffers on a GPU, its own where the host has two, else
sharing one). For each payload size the decode side obtains the prefill side's bytes
three ways, in the same run, interleaved per repetition:

- ``memcpy``: copying a local buffer of that size (the reference: the cost of one copy;
  on a GPU, a device-to-device copy, synchronized);
- ``nixl``: a UCX READ of the registered remote buffer into a registered local one (DRAM,
  or VRAM on a GPU), what vLLM's NixlConnector does;
- ``object_store``: ``ray.put`` on the prefill side, then ``ray.get`` + copy into the
  decode buffer, what splitserve's object-store fallback does (after the engines'
  connector has written / before it reads the payload file; on a GPU, through host
  memory both ways).

Prints a table and writes JSON with p50/p99 latency, GB/s at p50 and the ratio to memcpy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from load_tests.client.stats import percentile

MIB = 1 << 20
# Shared-memory transports have no peer failure handler, so the UCX backend is created
# with error handling mode "none".
UCX_PARAMS = {"ucx_error_handling_mode": "none"}


@dataclass(frozen=True)
class Placement:
    """Where the two sides' buffers live, and what that implies for NIXL and Ray."""

    device: str  # "cpu" or "cuda"
    gpus: int = 0  # GPUs Ray sees on this host (cuda only)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, not {self.device!r}")
        if self.device == "cuda" and self.gpus < 1:
            raise ValueError("--device cuda needs a GPU, and this host shows none")

    @property
    def memory(self) -> str:
        """NIXL's name for the buffers' memory."""
        return "VRAM" if self.device == "cuda" else "DRAM"

    @property
    def ucx_tls(self) -> str:
        """UCX's transports between two processes on this host: shared memory, and on a
        GPU CUDA IPC (peer to peer) and CUDA copies."""
        return "cuda_ipc,cuda_copy,sm,self" if self.device == "cuda" else "sm,self"

    def actor_options(self) -> dict[str, Any]:
        """Ray resources of one side: a core, and on a GPU host a GPU (half of the only
        one, so both sides share it)."""
        if self.device == "cpu":
            return {"num_cpus": 1}
        return {"num_cpus": 1, "num_gpus": 1 if self.gpus >= 2 else 0.5}


class Side:
    """One end of the transfer: a pinned process with a NIXL agent and a buffer."""

    def __init__(self, name: str, core: int, size: int, device: str = "cpu") -> None:
        import torch
        from nixl._api import nixl_agent, nixl_agent_config

        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {core % (os.cpu_count() or 1)})
        self.name = name
        self.device = device
        # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU: it is cuda:0 here.
        self.buffer = torch.from_numpy(
            np.random.default_rng(core).integers(0, 255, size, dtype=np.uint8)
        ).to(device)
        self.scratch = torch.empty_like(self.buffer)
        self.memory = "VRAM" if device == "cuda" else "DRAM"
        self.agent = nixl_agent(name, nixl_agent_config(backends=[]))
        self.agent.create_backend("UCX", UCX_PARAMS)
        self.agent.register_memory([self.buffer])
        self.remote = ""
        self.remote_region = (0, 0)

    def metadata(self) -> tuple[bytes, tuple[int, int]]:
        """This agent's metadata and its buffer's (address, device id)."""
        index = self.buffer.device.index or 0
        return self.agent.get_agent_metadata(), (int(self.buffer.data_ptr()), index)

    def gpu(self) -> str:
        """The GPU this side's buffers are on ('' on the host)."""
        import torch

        if self.device != "cuda":
            return ""
        return str(torch.cuda.get_device_name(self.buffer.device))

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize(self.buffer.device)

    def connect(self, metadata: bytes, region: tuple[int, int]) -> None:
        self.remote = self.agent.add_remote_agent(metadata)
        self.remote_region = region

    def nixl_read(self, size: int) -> float:
        local = self.agent.get_xfer_descs(self.buffer[:size])
        remote = self._remote_prefix(size)
        started = time.perf_counter()
        handle = self.agent.initialize_xfer("READ", local, remote, self.remote)
        state = self.agent.transfer(handle)
        while state == "PROC":
            state = self.agent.check_xfer_state(handle)
        elapsed = time.perf_counter() - started
        self.agent.release_xfer_handle(handle)
        if state != "DONE":
            raise RuntimeError(f"NIXL READ ended in state {state}")
        return elapsed

    def _remote_prefix(self, size: int) -> Any:
        addr, dev = self.remote_region
        return self.agent.get_xfer_descs([(addr, size, dev)], self.memory)

    def put(self, size: int) -> tuple[list[Any], float]:
        import ray

        started = time.perf_counter()
        ref = ray.put(self.buffer[:size].cpu().numpy())
        return [ref], time.perf_counter() - started

    def get(self, refs: list[Any], size: int) -> float:
        import ray
        import torch

        started = time.perf_counter()
        data = ray.get(refs[0])
        if self.device == "cpu":
            np.copyto(self.buffer[:size].numpy(), data)
        else:
            self.buffer[:size].copy_(torch.from_numpy(data))
            self._sync()
        return time.perf_counter() - started

    def memcpy(self, size: int) -> float:
        if self.device == "cpu":  # one single-threaded copy, as before GPU support
            src, dst = self.scratch[:size].numpy(), self.buffer[:size].numpy()
            started = time.perf_counter()
            np.copyto(dst, src)
            return time.perf_counter() - started
        self._sync()
        started = time.perf_counter()
        self.buffer[:size].copy_(self.scratch[:size])
        self._sync()
        return time.perf_counter() - started

    def checksum(self, size: int) -> int:
        import torch

        sample = self.buffer[:size][:: max(size // 4096, 1)]
        return int(sample.to(torch.int64).sum().item())


def gpu_count() -> int:
    """The GPUs torch sees on this host (0 without CUDA or without a CUDA torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def run(
    sizes_mib: list[int],
    repeats: int,
    ucx_tls: str | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    import ray

    placement = placement or Placement("cpu")
    largest = max(sizes_mib) * MIB
    ucx_env = {"UCX_TLS": ucx_tls or placement.ucx_tls}
    ray.init(
        num_cpus=2,
        num_gpus=placement.gpus,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=max(4 * largest, 1 << 30),
        runtime_env={"env_vars": ucx_env},
    )
    try:
        actor: Any = ray.remote(**placement.actor_options())(Side)
        prefill = actor.remote("prefill", 0, largest, placement.device)
        decode = actor.remote("decode", 1, largest, placement.device)
        gpus = ray.get([prefill.gpu.remote(), decode.gpu.remote()])
        # Agent metadata travels through Ray calls, not NIXL's own listener (which
        # would bind every interface).
        ray.get(decode.connect.remote(*ray.get(prefill.metadata.remote())))

        rows = []
        for size_mib in sizes_mib:
            size = size_mib * MIB
            times: dict[str, list[float]] = {"memcpy": [], "nixl": [], "object_store": []}
            for rep in range(repeats + 1):  # the first repetition warms up
                copy_s = ray.get(decode.memcpy.remote(size))
                nixl_s = ray.get(decode.nixl_read.remote(size))
                same = ray.get(prefill.checksum.remote(size)) == ray.get(
                    decode.checksum.remote(size)
                )
                if not same:
                    raise RuntimeError(f"NIXL READ of {size_mib} MiB delivered wrong bytes")
                refs, put_s = ray.get(prefill.put.remote(size))
                get_s = ray.get(decode.get.remote(refs, size))
                del refs
                if rep:
                    times["memcpy"].append(copy_s)
                    times["nixl"].append(nixl_s)
                    times["object_store"].append(put_s + get_s)
            copy_p50 = percentile(times["memcpy"], 50)
            for transport, values in times.items():
                p50 = percentile(values, 50)
                rows.append(
                    {
                        "size_mib": size_mib,
                        "transport": transport,
                        "p50_ms": p50 * 1000,
                        "p99_ms": percentile(values, 99) * 1000,
                        "gb_per_s": size / p50 / 1e9,
                        "vs_memcpy": copy_p50 / p50,
                    }
                )
    finally:
        ray.shutdown()
    return {
        "conditions": {
            "repeats": repeats,
            "sizes_mib": sizes_mib,
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "ucx": {**ucx_env, **UCX_PARAMS},
            "memory": f"{placement.memory} on both sides"
            + (f" ({gpus[0]} / {gpus[1]})" if placement.device == "cuda" else " (host)")
            + "; prefill actor on core 0, decode on core 1",
            "object_store": "ray.put (prefill) + ray.get + copy into the buffer (decode)",
        },
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mib", default="1,16,64,256")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where both sides' buffers live: host memory, or GPU memory (VRAM to VRAM)",
    )
    parser.add_argument(
        "--ucx-tls",
        default=None,
        help="UCX's transports for the NIXL READ (default: sm,self on the host, any "
        "shared-memory one; cuda_ipc,cuda_copy,sm,self on a GPU; cma,self: "
        "process_vm_readv, one copy)",
    )
    parser.add_argument("--out", default="load_tests/results/kv_transfer.json")
    args = parser.parse_args()
    try:
        placement = Placement(args.device, gpu_count() if args.device == "cuda" else 0)
    except ValueError as exc:
        parser.exit(2, f"kv_transfer_bench: {exc}\n")
    result = run([int(s) for s in args.sizes_mib.split(",")], args.repeats, args.ucx_tls, placement)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{'MiB':>5} {'transport':<13} {'p50 ms':>9} {'p99 ms':>9} {'GB/s':>7} {'x memcpy':>8}")
    for row in result["rows"]:
        print(
            f"{row['size_mib']:>5} {row['transport']:<13} {row['p50_ms']:>9.2f} "
            f"{row['p99_ms']:>9.2f} {row['gb_per_s']:>7.2f} {row['vs_memcpy']:>8.2f}"
        )


if __name__ == "__main__":
    main()
