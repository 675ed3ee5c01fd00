"""The user-facing configuration: what a YAML file's ``args:`` block may say.

Every model is strict (``extra="forbid"``): an unknown key or a bad value fails when the
application is built, and pydantic's message names the field. Internal runtime records
live in :mod:`app.pool.records`, not here.
"""

from app.config.app import AppConfig
from app.config.base import Mode
from app.config.deployment import (
    AdmissionConfig,
    AutoscalingConfig,
    DeploymentOptions,
    IngressConfig,
    PoolConfig,
    RayActorOptions,
)
from app.config.model import ModelConfig
from app.config.openai import OpenAIConfig
from app.config.planner_model import PlannerModelConfig
from app.config.priority import PriorityClass, PriorityConfig
from app.config.routing import MigrationConfig, RequestPathConfig, RouterConfig
from app.config.serve_file import serve_file_args, serve_file_policy
from app.config.slo import SloConfig
from app.config.tracing import TracingConfig
from app.config.transport import TransportConfig

__all__ = [
    "AdmissionConfig",
    "AppConfig",
    "AutoscalingConfig",
    "DeploymentOptions",
    "IngressConfig",
    "MigrationConfig",
    "Mode",
    "ModelConfig",
    "OpenAIConfig",
    "PlannerModelConfig",
    "PoolConfig",
    "PriorityClass",
    "PriorityConfig",
    "RayActorOptions",
    "RequestPathConfig",
    "RouterConfig",
    "SloConfig",
    "TracingConfig",
    "TransportConfig",
    "serve_file_args",
    "serve_file_policy",
]
