"""The service-level objective: the YAML's `slo:` block.

One block read by the SLO autoscaling policy (``deployments.slo_autoscaler``), the load
tests' goodput and the planner: targets for time to first token (TTFT) and time per
output token (TPOT) at a percentile, and the share of requests that must meet both.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from app.config.base import Strict


class SloConfig(Strict):
    """TTFT and TPOT targets at a percentile, and the share of requests meeting both."""

    ttft_ms: float = Field(5000.0, gt=0, description="Time-to-first-token target, ms.")
    tpot_ms: float = Field(100.0, gt=0, description="Time-per-output-token target, ms.")
    percentile: float = Field(
        90.0,
        gt=0,
        lt=100,
        description="The percentile the targets hold at (90: p90 TTFT <= ttft_ms and p90 "
        "TPOT <= tpot_ms). The autoscaler compares the pools' measured percentile with "
        "the targets.",
    )
    attainment: float = Field(
        0.9,
        gt=0,
        le=1,
        description="The share of requests that must meet both targets (goodput counts "
        "requests that do). Must not exceed the percentile's share.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SloConfig:
        if self.attainment > self.percentile / 100 + 1e-9:
            raise ValueError(
                f"attainment {self.attainment} cannot exceed the percentile's share "
                f"{self.percentile / 100}: targets at p{self.percentile:g} let "
                f"{100 - self.percentile:g}% of requests miss them"
            )
        return self

    @classmethod
    def from_serve_file(cls, path: str) -> SloConfig:
        """The ``slo:`` block of a Serve config file's application (defaults if absent)."""
        from app.config.serve_file import serve_file_args

        return cls.model_validate(serve_file_args(path).get("slo") or {})

    @property
    def ttft_s(self) -> float:
        return self.ttft_ms / 1000

    @property
    def tpot_s(self) -> float:
        return self.tpot_ms / 1000
