"""The base of every config model, and the application's mode."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mode(StrEnum):
    DISAGGREGATED = "disaggregated"
    COLOCATED = "colocated"
