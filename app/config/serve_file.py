"""Reading a Serve config file (``serve_configs/*.yaml``): its one application's ``args``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

IMPORT_PATH = "deployments.builder:build_app"


def serve_file_args(path: str | Path) -> dict[str, Any]:
    """The ``args`` of the one splitserve application a Serve config file declares."""
    import yaml

    document = yaml.safe_load(Path(path).read_text())
    applications = document.get("applications") if isinstance(document, dict) else None
    if not isinstance(applications, list) or len(applications) != 1:
        raise ValueError(f"{path}: a splitserve config declares exactly one application")
    (application,) = applications
    if application.get("import_path") != IMPORT_PATH:
        raise ValueError(f"{path}: import_path must be {IMPORT_PATH}")
    args: dict[str, Any] = application.get("args") or {}
    return args
