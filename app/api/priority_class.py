"""The priority class a request names in its header (``priority:`` in the config)."""

from __future__ import annotations

from collections.abc import Mapping

from app.api.errors import bad_request
from app.config import PriorityClass, PriorityConfig


def request_class(
    config: PriorityConfig | None, headers: Mapping[str, str]
) -> tuple[str, PriorityClass] | None:
    """The class ``headers`` name (the default without one); None when the app has no
    classes; a 400 naming the known classes for an unknown one."""
    if config is None or not config.enabled:
        return None
    named = headers.get(config.header)
    chosen = config.of(named)
    if chosen is None:
        known = ", ".join(sorted(config.classes))
        raise bad_request(
            f"unknown priority class {(named or '')[:64]!r} in {config.header}; "
            f"the classes are: {known}",
            param=config.header,
        )
    return chosen
