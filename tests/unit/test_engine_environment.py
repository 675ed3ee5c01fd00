"""What each engine's processes see in their environment, per role and config."""

import pytest
from pydantic import ValidationError

from app.config import AppConfig
from app.engine import setup as engine_setup
from app.engine.setup import engine_environment, side_channel_host
from app.kv import nixl_progress
from app.pool.records import Role


def _env(role: Role, **transport):
    config = AppConfig.model_validate({"transport": transport})
    pool = config.pool_for(role)
    return engine_environment(role, pool, config, side_channel_port=5555)


def test_disaggregated_roles_get_side_channel_and_a_pausing_progress_thread():
    env = _env(Role.PREFILL)
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5555"
    assert env[nixl_progress.ENV] == "1"
    assert env[nixl_progress.POLL_ENV] == "50000"
    assert "UCX_TLS" not in env
    # A loopback side channel keeps UCX off every other interface too.
    assert env["UCX_NET_DEVICES"] == "lo"


@pytest.mark.parametrize(
    ("transport", "devices"),
    [
        ({"side_channel_host": "::1"}, "lo"),
        ({"side_channel_host": "localhost"}, "lo"),
        ({"side_channel_host": "10.0.0.7"}, None),  # the cluster's network: UCX's default
        ({"side_channel_host": "10.0.0.7", "ucx_net_devices": "eth1"}, "eth1"),
        ({"ucx_net_devices": "mlx5_0:1,eth1"}, "mlx5_0:1,eth1"),
        ({"ucx_net_devices": "all"}, "all"),
    ],
)
def test_ucx_net_devices_follow_the_side_channel_unless_set(transport, devices):
    env = _env(Role.PREFILL, **transport)
    assert env.get("UCX_NET_DEVICES") == devices


@pytest.mark.parametrize("bad", ["", "eth0; rm -rf /", "eth0 eth1", "eth0,"])
def test_ucx_net_devices_refuses_junk(bad):
    with pytest.raises(ValidationError, match="ucx_net_devices"):
        AppConfig.model_validate({"transport": {"ucx_net_devices": bad}})


def test_progress_thread_and_ucx_transports_are_configurable():
    env = _env(Role.DECODE, nixl_progress_thread=False, nixl_progress_poll_ms=0, ucx_tls="tcp")
    assert env[nixl_progress.ENV] == "0"
    assert env[nixl_progress.POLL_ENV] == "0"
    assert env["UCX_TLS"] == "tcp"


def test_colocated_engines_have_no_nixl_settings():
    env = _env(Role.COLOCATED)
    assert not any(key.startswith(("VLLM_NIXL", "UCX")) for key in env)
    assert nixl_progress.ENV not in env and nixl_progress.POLL_ENV not in env


def test_side_channel_host_auto_is_this_nodes_address():
    assert side_channel_host("10.1.2.3") == "10.1.2.3"
    address = side_channel_host("auto")
    assert address and address != "auto"


@pytest.mark.parametrize("good", ["tcp", "rc,ud,sm,self", "^cuda_ipc"])
def test_ucx_tls_accepts_transport_lists(good):
    assert AppConfig.model_validate({"transport": {"ucx_tls": good}}).transport.ucx_tls == good


@pytest.mark.parametrize("bad", ["", "tcp; rm -rf /", "TCP SM"])
def test_ucx_tls_refuses_junk(bad):
    with pytest.raises(ValidationError, match="ucx_tls"):
        AppConfig.model_validate({"transport": {"ucx_tls": bad}})


def test_chunk_interval_grows_with_streams_up_to_the_cap():
    from app.engine.server import EngineServer

    server = EngineServer(
        object(), Role.DECODE, "d", stream_interval_s=0.05, stream_messages_per_s=400
    )
    server.streams = 1
    assert server.chunk_interval() == pytest.approx(0.0025)
    server.streams = 16
    assert server.chunk_interval() == pytest.approx(0.04)
    server.streams = 64
    assert server.chunk_interval() == pytest.approx(0.05)
    fixed = EngineServer(object(), Role.DECODE, "d", stream_interval_s=0.01)
    fixed.streams = 64
    assert fixed.chunk_interval() == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("on_gpu", "on_gpu_too", "bound"),
    [(False, False, "1"), (True, False, None), (True, True, "1"), (False, True, "1")],
)
def test_cpu_binding_applies_on_gpu_hosts_only_when_asked(monkeypatch, on_gpu, on_gpu_too, bound):
    from app.engine import setup as engine_setup

    monkeypatch.setattr(engine_setup, "_on_gpu", lambda: on_gpu)
    config = AppConfig.model_validate(
        {"decode": {"cpu_binding": "1", "cpu_binding_on_gpu": on_gpu_too}}
    )
    assert engine_setup.cpu_binding(config.decode) == bound
    env = engine_environment(Role.DECODE, config.decode, config, side_channel_port=5555)
    assert env.get("VLLM_CPU_OMP_THREADS_BIND") == bound


def test_a_gpu_host_picks_cuda_buffers_for_auto(monkeypatch):
    from app.engine import setup as engine_setup

    config = AppConfig.model_validate({"transport": {"kv_buffer_device": "auto"}})
    for on_gpu, device in ((True, "cuda"), (False, "cpu")):
        monkeypatch.setattr(engine_setup, "_on_gpu", lambda on_gpu=on_gpu: on_gpu)
        kv = engine_setup.kv_transfer_config(Role.DECODE, config, "decode-1")
        assert kv.kv_buffer_device == device


def test_each_pool_sets_its_own_step_budget_and_long_prompt_cap():
    config = AppConfig.model_validate(
        {"prefill": {"max_num_batched_tokens": 512, "long_prefill_token_threshold": 384}}
    )
    prefill = engine_setup.engine_arguments(Role.PREFILL, config, "/model", "prefill-1")
    assert (prefill.max_num_batched_tokens, prefill.long_prefill_token_threshold) == (512, 384)
    decode = engine_setup.engine_arguments(Role.DECODE, config, "/model", "decode-1")
    assert (decode.max_num_batched_tokens, decode.long_prefill_token_threshold) == (None, 0)


def test_a_long_prompt_cap_must_leave_room_in_the_step():
    with pytest.raises(ValidationError, match="long_prefill_token_threshold"):
        AppConfig.model_validate(
            {"decode": {"max_num_batched_tokens": 256, "long_prefill_token_threshold": 256}}
        )


@pytest.mark.parametrize(
    ("pool", "field"),
    [
        ({"max_num_batched_tokens": 32}, "prefill.max_num_batched_tokens"),
        ({"long_prefill_token_threshold": 4096}, "prefill.long_prefill_token_threshold"),
    ],
)
def test_step_settings_that_vllm_would_refuse_at_start_are_refused_with_the_field(pool, field):
    # model.max_num_seqs is 64 and model.max_model_len 2048 by default.
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        AppConfig.model_validate({"prefill": pool})


def _addresses(monkeypatch, table):
    """This host's interfaces and addresses as psutil would list them: ``table``."""
    import socket
    from types import SimpleNamespace

    import psutil

    listing = {
        name: [SimpleNamespace(family=socket.AF_INET, address=a) for a in addresses]
        for name, addresses in table.items()
    }
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: listing)


def test_a_network_names_this_hosts_address_in_it_and_ucx_its_interface(monkeypatch):
    _addresses(monkeypatch, {"lo": ["127.0.0.1"], "eth0": ["198.51.100.4"], "eth1": ["10.1.0.5"]})
    env = _env(Role.PREFILL, side_channel_host="10.1.0.0/16")
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.1.0.5"
    assert env["UCX_NET_DEVICES"] == "eth1"
    # An RDMA port is named by hand; a loopback network is still `lo`.
    env = _env(Role.DECODE, side_channel_host="10.1.0.0/16", ucx_net_devices="mlx5_0:1")
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1"
    assert _env(Role.DECODE, side_channel_host="127.0.0.0/8")["UCX_NET_DEVICES"] == "lo"


def test_a_network_this_host_is_not_on_is_named_with_the_hosts_addresses(monkeypatch):
    _addresses(monkeypatch, {"lo": ["127.0.0.1"], "eth0": ["198.51.100.4"]})
    with pytest.raises(ValueError, match=r"no address in 10\.1\.0\.0/16.*198\.51\.100\.4 \(eth0\)"):
        side_channel_host("10.1.0.0/16")


def test_a_side_channel_network_must_parse():
    with pytest.raises(ValidationError, match="not a network"):
        AppConfig.model_validate({"transport": {"side_channel_host": "10.1.0.0/99"}})
    config = AppConfig.model_validate({"transport": {"side_channel_host": "10.1.0.7/16"}})
    assert config.transport.side_channel_host == "10.1.0.7/16"
