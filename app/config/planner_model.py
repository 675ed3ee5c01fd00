"""The planner's model as the SLO policy's check: ``policy_kwargs.model`` in a Serve
config (``deployments.slo_autoscaler``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from app.config.base import Strict
from app.config.routing import RouterConfig

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class PlannerModelConfig(Strict):
    """What ``splitserve plan`` models: the engines' measured costs, the KV link, the
    router's threshold, the front end's CPU and the cores it shares."""

    profile: str = Field(
        description="An engine profile written by `splitserve profile` (JSON). A relative "
        "path is looked up from the directory Serve's controller runs in, then from the "
        "project's root."
    )
    frontend: str | None = Field(
        None,
        description="The front end's CPU costs written by `load_tests.planning.frontend_fit` "
        "(JSON; looked up as `profile`). None: the serving path costs no CPU.",
    )
    cores: int = Field(
        0,
        ge=0,
        description="Cores the engines and the front end share (as `splitserve plan "
        "--cores`); 0: each engine has its own.",
    )
    kv_bytes_per_token: int = Field(0, ge=0, description="KV bytes per prompt token.")
    link_gbps: float = Field(0.0, ge=0, description="The KV link's rate; 0: free.")
    local_prefill_below_tokens: int = Field(
        RouterConfig.model_fields["local_prefill_below_tokens"].default,
        ge=0,
        description="Prompts shorter than this are prefilled on decode: keep it equal to "
        "the app's `router.local_prefill_below_tokens`.",
    )
    duration_s: float = Field(
        60.0,
        gt=0,
        description="Seconds of arrivals each candidate split is simulated for (a short "
        "run hides a queue that builds slowly, as the planner's goodput search knows).",
    )

    def path(self, name: str) -> Path:
        """``name`` (``profile`` or ``frontend``) as a file that exists, or a
        FileNotFoundError that names every place looked in."""
        given = Path(getattr(self, name))
        tried = [given] if given.is_absolute() else [Path.cwd() / given, PROJECT_ROOT / given]
        for candidate in tried:
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"policy_kwargs.model.{name}: no file {given} (looked in "
            + ", ".join(str(c) for c in tried)
            + ")"
        )
