"""Shared fixtures: the builtin tiny model and its tokenizer (generated once per session)."""

from __future__ import annotations

from typing import Any

import pytest

from app.model.source import resolve_model


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    return resolve_model("builtin:tiny-llama")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)
