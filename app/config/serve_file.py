"""Reading a Serve config file (``serve_configs/*.yaml``): its one application."""

from __future__ import annotations

from pathlib import Path
from typing import Any

IMPORT_PATH = "deployments.builder:build_app"


def serve_file_application(path: str | Path) -> dict[str, Any]:
    """The one splitserve application a Serve config file declares, as written."""
    import yaml

    document = yaml.safe_load(Path(path).read_text())
    applications = document.get("applications") if isinstance(document, dict) else None
    if not isinstance(applications, list) or len(applications) != 1:
        raise ValueError(f"{path}: a splitserve config declares exactly one application")
    (application,) = applications
    if application.get("import_path") != IMPORT_PATH:
        raise ValueError(f"{path}: import_path must be {IMPORT_PATH}")
    return dict(application)


def serve_file_args(path: str | Path) -> dict[str, Any]:
    """The ``args`` of the one splitserve application a Serve config file declares."""
    args: dict[str, Any] = serve_file_application(path).get("args") or {}
    return args


def serve_file_policy(path: str | Path) -> dict[str, Any] | None:
    """The application-level ``autoscaling_policy`` of the config file, if it has one
    (``serve run`` applies it; ``build_app`` cannot: Serve reads it from the file)."""
    policy: dict[str, Any] | None = serve_file_application(path).get("autoscaling_policy")
    return policy
