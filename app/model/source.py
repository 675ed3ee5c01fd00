"""Turns the YAML's ``model`` into something vLLM can load.

``builtin:<name>`` resolves to a model generated locally and cached; anything else (a
local HF model folder or a hub id) is passed to vLLM unchanged.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from app.model import tiny_llama

BUILTIN_PREFIX = "builtin:"

_BUILTINS: dict[str, tuple[int, Callable[[Path], Path]]] = {
    "tiny-llama": (tiny_llama.RECIPE_VERSION, tiny_llama.generate),
}


def builtin_names() -> list[str]:
    return sorted(_BUILTINS)


def cache_root() -> Path:
    """Where generated models live: ``$SPLITSERVE_CACHE`` or ``~/.cache/splitserve``."""
    env = os.environ.get("SPLITSERVE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "splitserve"


def is_builtin(source: str) -> bool:
    return source.startswith(BUILTIN_PREFIX)


def resolve_model(source: str) -> str:
    """Return a path or hub id for vLLM; builtin models are generated on first use.

    Safe to call from several processes at once: generation happens under a file lock
    into a temporary folder that is renamed into place, so nobody sees a half-written model.
    """
    if not is_builtin(source):
        return source
    name = source[len(BUILTIN_PREFIX) :]
    if name not in _BUILTINS:
        raise ValueError(
            f"unknown builtin model {source!r}; known: "
            + ", ".join(BUILTIN_PREFIX + n for n in builtin_names())
        )
    version, make = _BUILTINS[name]
    root = cache_root()
    target = root / f"{name}-v{version}"
    if (target / "config.json").exists():
        return str(target)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").exists():
            staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                make(staging / "model")
                os.replace(staging / "model", target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return str(target)
