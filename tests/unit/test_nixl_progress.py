"""The vLLM plugin that keeps NIXL's progress thread from spinning (or turns it off)."""

import pytest

from app.kv import nixl_progress


class _Config:
    def __init__(self, enable_prog_thread: bool = True, num_threads: int = 0) -> None:
        self.enable_prog_thread = enable_prog_thread
        self.num_threads = num_threads


def _bindings():
    from vllm.distributed import nixl_utils

    if nixl_utils.nixl_agent_config is None:
        pytest.skip("NIXL is not installed")
    import importlib

    module = importlib.import_module(nixl_utils.nixl_agent_config.__module__)
    return module.nixlBind


def test_wrapper_forces_the_thread_off_and_keeps_other_arguments():
    make = nixl_progress.without_progress_thread(_Config)
    config = make(num_threads=4)
    assert config.enable_prog_thread is False
    assert config.num_threads == 4
    assert make(enable_prog_thread=True).enable_prog_thread is False


def test_poll_delay_survives_nixls_zero():
    """`nixl_agent` assigns pthrDelay = 0; the wrapped native config keeps the floor."""
    bindings = _bindings()
    native = getattr(bindings.nixlAgentConfig, "splitserve_wrapped", bindings.nixlAgentConfig)
    config = nixl_progress.with_poll_delay(native, 5000)()
    config.pthrDelay = 0
    assert config.pthrDelay == 5000
    config.pthrDelay = 20000
    assert config.pthrDelay == 20000
    assert isinstance(config, native)


def test_register_changes_nothing_unless_asked(monkeypatch):
    from vllm.distributed import nixl_utils

    bindings = _bindings()
    monkeypatch.delenv(nixl_progress.ENV, raising=False)
    monkeypatch.delenv(nixl_progress.POLL_ENV, raising=False)
    before = nixl_utils.nixl_agent_config, bindings.nixlAgentConfig
    nixl_progress.register()
    monkeypatch.setenv(nixl_progress.ENV, "1")
    monkeypatch.setenv(nixl_progress.POLL_ENV, "0")
    nixl_progress.register()
    assert (nixl_utils.nixl_agent_config, bindings.nixlAgentConfig) == before


def test_register_pauses_the_thread_vllm_builds(monkeypatch):
    """An agent built the way vLLM builds it gets the configured delay, once wrapped."""
    bindings = _bindings()
    monkeypatch.setattr(bindings, "nixlAgentConfig", bindings.nixlAgentConfig)
    monkeypatch.setenv(nixl_progress.ENV, "1")
    monkeypatch.setenv(nixl_progress.POLL_ENV, "7000")
    nixl_progress.register()
    nixl_progress.register()  # idempotent: wraps the native class, not the wrapper
    made = bindings.nixlAgentConfig
    assert made.splitserve_wrapped.__name__ == "nixlAgentConfig"
    config = made()
    config.pthrDelay = 0  # what nixl_agent.__init__ does
    assert config.pthrDelay == 7000


def test_register_reaches_vllms_nixl_worker(monkeypatch):
    """With the thread off, the config vLLM's NIXL worker builds has no progress thread."""
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
