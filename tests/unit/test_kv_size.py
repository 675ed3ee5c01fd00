"""The KV calculator against worked numbers (a 70B GQA model's 327,680 B/token) and
known model shapes."""

import json

import pytest

from app.planning.kv_size import (
    KVShape,
    shape_from_config,
    shape_from_model,
    transfer_seconds,
    wire_seconds,
)
from tests.unit.model_configs import DEEPSEEK_V3, LLAMA_70B


def test_70b_gqa_worked_numbers():
    shape = shape_from_config(LLAMA_70B)
    assert shape.bytes_per_token() == 327_680
    nbytes = shape.bytes_per_request(4096)
    assert nbytes == 1_342_177_280  # "1.34 GB"
    assert round(wire_seconds(nbytes, 100) * 1000) == 107
    assert round(wire_seconds(nbytes, 400) * 1000) == 27


def test_fp8_kv_halves_the_bytes():
    assert shape_from_config(LLAMA_70B).bytes_per_token(kv_dtype="fp8") == 163_840


def test_tensor_parallel_splits_kv_heads_then_replicates_them():
    shape = shape_from_config(LLAMA_70B)
    assert shape.bytes_per_token_per_rank(8) == 40_960  # one KV head per rank
    assert shape.bytes_per_token(8) == 327_680  # all ranks together: the same total
    assert shape.bytes_per_token_per_rank(16) == 40_960  # 8 heads, 16 ranks: replicated
    assert shape.bytes_per_token(16) == 655_360


def test_mla_latent_cache_is_per_layer_and_replicated_across_ranks():
    shape = shape_from_config(DEEPSEEK_V3)
    assert shape.is_mla
    assert shape.bytes_per_token() == 61 * 576 * 2 == 70_272
    assert shape.bytes_per_token_per_rank(8) == 70_272
    assert shape.bytes_per_token(8) == 8 * 70_272


def test_mha_defaults_and_explicit_head_dim():
    config: dict[str, object] = {
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 256,
    }
    assert shape_from_config(config).bytes_per_token() == 2 * 2 * 4 * 64 * 2
    config["head_dim"] = 128
    config["dtype"] = "float32"
    assert shape_from_config(config).bytes_per_token() == 2 * 2 * 4 * 128 * 4


def test_builtin_model_and_config_file(tmp_path):
    assert shape_from_model("builtin:tiny-llama").bytes_per_token() == 2 * 4 * 2 * 64 * 2
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))
    assert shape_from_model(str(tmp_path)).bytes_per_token() == 327_680
    assert shape_from_model(str(tmp_path / "config.json")).bytes_per_token() == 327_680


def test_transfer_time_by_network_kind():
    nbytes = 1e9
    assert transfer_seconds(nbytes, 100, efficiency=1.0) == pytest.approx(0.08)
    assert transfer_seconds(nbytes, 100, "tcp") > transfer_seconds(nbytes, 100, "rdma")
    assert transfer_seconds(nbytes, 100, "rdma", latency_s=0.001) == pytest.approx(
        0.001 + 0.08 / 0.9
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"num_attention_heads": 4, "hidden_size": 256},
        {"num_hidden_layers": 0, "num_attention_heads": 4, "hidden_size": 256},
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "dtype": "int3"},
    ],
)
def test_bad_configs_are_refused_with_a_reason(bad):
    with pytest.raises(ValueError):
        shape_from_config(bad)


def test_bad_link_and_parallelism():
    with pytest.raises(ValueError):
        wire_seconds(1, 0)
    with pytest.raises(ValueError):
        KVShape(layers=1, kv_heads=1, head_dim=1).bytes_per_token(0)


def test_model_from_a_serve_config_yaml_and_clear_errors_otherwise(tmp_path):
    from app.planning.kv_size import shape_from_model

    # A serve config: its app's model.source (the builtin tiny model here).
    assert shape_from_model("serve_configs/default.yaml") == shape_from_model("builtin:tiny-llama")
    with pytest.raises(ValueError, match="hub id is not fetched"):
        shape_from_model("some-org/some-model")
    bad = tmp_path / "config.json"
    bad.write_text("not json")
    with pytest.raises(ValueError, match=r"not a readable model config\.json"):
        shape_from_model(str(bad))
