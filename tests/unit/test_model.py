import hashlib
from pathlib import Path

import pytest

from app.model import tiny_llama
from app.model.source import resolve_model


def _digest(folder):
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.iterdir())
        if f.is_file()
    }


def test_tiny_model_generation_is_deterministic(tmp_path):
    first = tiny_llama.generate(tmp_path / "a")
    second = tiny_llama.generate(tmp_path / "b")
    assert _digest(first) == _digest(second)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(_digest(first))


def test_builtin_resolves_to_a_cached_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path))
    path = resolve_model("builtin:tiny-llama")
    assert path.startswith(str(tmp_path))
    weights = Path(path) / "model.safetensors"
    written = weights.stat().st_mtime_ns, weights.stat().st_ino
    assert resolve_model("builtin:tiny-llama") == path
    # cached, not regenerated: the same file, never rewritten
    assert (weights.stat().st_mtime_ns, weights.stat().st_ino) == written


def test_tokenizer_has_special_tokens_and_chat_template(tokenizer):
    assert tokenizer.bos_token == "<s>" and tokenizer.eos_token == "</s>"
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert rendered == "<s><|user|>\nhi</s>\n<|assistant|>\n"
    assert 900 <= len(tokenizer) <= 1100


def test_unknown_builtin_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="builtin:tiny-llama"):
        resolve_model("builtin:giant")


def test_other_sources_pass_through():
    assert resolve_model("/models/llama") == "/models/llama"
    assert resolve_model("meta-llama/Llama-3.1-8B") == "meta-llama/Llama-3.1-8B"
