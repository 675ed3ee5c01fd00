"""The vLLM plugin that keeps NIXL's busy-polling progress thread off."""

import pytest

from app.kv_transport import nixl_progress


class _Config:
    def __init__(self, enable_prog_thread: bool = True, num_threads: int = 0) -> None:
        self.enable_prog_thread = enable_prog_thread
        self.num_threads = num_threads


def test_wrapper_forces_the_thread_off_and_keeps_other_arguments():
    make = nixl_progress.without_progress_thread(_Config)
    config = make(num_threads=4)
    assert config.enable_prog_thread is False
    assert config.num_threads == 4
    assert make(enable_prog_thread=True).enable_prog_thread is False


def test_register_changes_nothing_unless_asked(monkeypatch):
    from vllm.distributed import nixl_utils

    monkeypatch.delenv(nixl_progress.ENV, raising=False)
    before = nixl_utils.nixl_agent_config
    nixl_progress.register()
    assert nixl_utils.nixl_agent_config is before
    monkeypatch.setenv(nixl_progress.ENV, "1")
    nixl_progress.register()
    assert nixl_utils.nixl_agent_config is before


def test_register_reaches_vllms_nixl_worker(monkeypatch):
    """With the env var at 0, the config vLLM's NIXL worker builds has no progress thread."""
    from vllm.distributed import nixl_utils
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl import base_worker

    original = nixl_utils.nixl_agent_config
    if original is None:
        pytest.skip("NIXL is not installed")
    monkeypatch.setattr(nixl_utils, "nixl_agent_config", original)
    monkeypatch.setattr(base_worker, "nixl_agent_config", original)
    monkeypatch.setenv(nixl_progress.ENV, "0")
    nixl_progress.register()
    nixl_progress.register()  # idempotent: wrapped once
    make = base_worker.nixl_agent_config  # type: ignore[attr-defined]
    config = make(num_threads=4, capture_telemetry=True)
    assert config.enable_pthread is False
    assert config.num_threads == 4
    assert make.splitserve_wrapped is original
