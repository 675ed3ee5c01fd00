"""Fixtures shared by the unit tests' modules."""

# The real OpenAI layer over fake pools (tests/unit/http_api_fakes.py).
from tests.unit.http_api_fakes import client, engine_client  # noqa: F401
