"""One side of a NIXL READ over UCX TCP, as its own process (see test_nixl_progress_tcp.py).

``target DIR``: registers a buffer of ones, writes its agent metadata and descriptors to
DIR, then does nothing (no NIXL call) until DIR/done appears, as an idle prefill engine.
``initiator DIR SECONDS``: READs the target's buffer and prints the outcome as JSON.
Both apply splitserve's vLLM plugin first, under the environment the test sets, as vLLM
does in its worker processes.
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

BYTES = 4 << 20


def _agent(name: str):  # type: ignore[no-untyped-def]
    import torch

    from app.kv import nixl_progress

    nixl_progress.register()
    from vllm.distributed import nixl_utils

    agent = nixl_utils.NixlWrapper(name, nixl_utils.nixl_agent_config())
    buffer = torch.full((BYTES // 4,), 1.0 if name == "target" else 0.0)
    agent.register_memory(buffer)
    return agent, buffer, agent.get_xfer_descs(buffer)


def target(folder: Path) -> None:
    agent, _buffer, descs = _agent("target")
    staged = folder / "target.pkl.part"
    published = (agent.get_agent_metadata(), agent.get_serialized_descs(descs))
    staged.write_bytes(pickle.dumps(published))
    staged.rename(folder / "target.pkl")
    deadline = time.monotonic() + 120
    while not (folder / "done").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def initiator(folder: Path, seconds: float) -> None:
    agent, buffer, descs = _agent("initiator")
    published = folder / "target.pkl"
    while not published.exists():
        time.sleep(0.05)
    metadata, remote_descs = pickle.loads(published.read_bytes())
    remote = agent.add_remote_agent(metadata)
    handle = agent.initialize_xfer("READ", descs, agent.deserialize_descs(remote_descs), remote)
    started = time.monotonic()
    agent.transfer(handle)
    state = agent.check_xfer_state(handle)
    while state == "PROC" and time.monotonic() - started < seconds:
        time.sleep(0.001)
        state = agent.check_xfer_state(handle)
    print(json.dumps({
        "state": state,
        "seconds": time.monotonic() - started,
        "copied": bool(buffer.min() == 1.0),
    }))  # fmt: skip
    (folder / "done").touch()


if __name__ == "__main__":
    if sys.argv[1] == "target":
        target(Path(sys.argv[2]))
    else:
        initiator(Path(sys.argv[2]), float(sys.argv[3]))
