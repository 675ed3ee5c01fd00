"""KV transport benchmark: NIXL vs the Ray object store vs a plain memcpy, side by side.

    scripts/loopback-netns .venv/bin/python -m load_tests.kv_transfer_bench   (or: make bench-kv)

Two Ray actors stand in for a prefill and a decode replica, each pinned to its own core.
For each payload size the decode side obtains the prefill side's bytes three ways, in the
same run, interleaved per repetition:

- ``memcpy``: copying a local buffer of that size (the reference: the cost of one copy);
- ``nixl``: a UCX READ of the registered remote buffer into a registered local one (DRAM),
  what vLLM's NixlConnector does;
- ``object_store``: ``ray.put`` on the prefill side, then ``ray.get`` + copy into the
  decode buffer, what splitserve's object-store fallback does (after the engines'
  connector has written / before it reads the payload file).

Prints a table and writes JSON with p50/p99 latency, GB/s at p50 and the ratio to memcpy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from load_tests.stats import percentile

MIB = 1 << 20
# Shared memory between processes on one host. Shared-memory transports have no peer
# failure handler, so the UCX backend is created with error handling mode "none".
UCX_ENV = {"UCX_TLS": "sm,self"}
UCX_PARAMS = {"ucx_error_handling_mode": "none"}


class Side:
    """One end of the transfer: a pinned process with a NIXL agent and a buffer."""

    def __init__(self, name: str, core: int, size: int) -> None:
        import torch
        from nixl._api import nixl_agent, nixl_agent_config

        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {core % (os.cpu_count() or 1)})
        self.name = name
        self.buffer = torch.from_numpy(
            np.random.default_rng(core).integers(0, 255, size, dtype=np.uint8)
        )
        self.scratch = torch.empty_like(self.buffer)
        self.agent = nixl_agent(name, nixl_agent_config(backends=[]))
        self.agent.create_backend("UCX", UCX_PARAMS)
        self.agent.register_memory([self.buffer])
        self.remote = ""
        self.remote_region = (0, 0)

    def metadata(self) -> tuple[bytes, tuple[int, int]]:
        """This agent's metadata and its buffer's (address, device id)."""
        return self.agent.get_agent_metadata(), (int(self.buffer.data_ptr()), 0)

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
        return self.agent.get_xfer_descs([(addr, size, dev)], "DRAM")

    def put(self, size: int) -> tuple[list[Any], float]:
        import ray

        started = time.perf_counter()
        ref = ray.put(self.buffer[:size].numpy())
        return [ref], time.perf_counter() - started

    def get(self, refs: list[Any], size: int) -> float:
        import ray

        started = time.perf_counter()
        data = ray.get(refs[0])
        np.copyto(self.buffer[:size].numpy(), data)
        return time.perf_counter() - started

    def memcpy(self, size: int) -> float:
        src, dst = self.scratch[:size].numpy(), self.buffer[:size].numpy()
        started = time.perf_counter()
        np.copyto(dst, src)
        return time.perf_counter() - started

    def checksum(self, size: int) -> int:
        return int(self.buffer[:size].numpy()[:: max(size // 4096, 1)].astype(np.uint64).sum())


def run(sizes_mib: list[int], repeats: int, ucx_tls: str = UCX_ENV["UCX_TLS"]) -> dict[str, Any]:
    import ray

    largest = max(sizes_mib) * MIB
    ucx_env = {"UCX_TLS": ucx_tls}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=max(4 * largest, 1 << 30),
        runtime_env={"env_vars": ucx_env},
    )
    try:
        actor: Any = ray.remote(num_cpus=1)(Side)
        prefill = actor.remote("prefill", 0, largest)
        decode = actor.remote("decode", 1, largest)
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
            "memory": "DRAM (host) on both sides; prefill actor on core 0, decode on core 1",
            "object_store": "ray.put (prefill) + ray.get + np.copyto (decode)",
        },
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mib", default="1,16,64,256")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--ucx-tls",
        default=UCX_ENV["UCX_TLS"],
        help="UCX's transports for the NIXL READ (%(default)s: any shared-memory one; "
        "cma,self: process_vm_readv, one copy)",
    )
    parser.add_argument("--out", default="load_tests/results/kv_transfer.json")
    args = parser.parse_args()
    result = run([int(s) for s in args.sizes_mib.split(",")], args.repeats, args.ucx_tls)
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
