"""Priority classes: `priority:`."""

from __future__ import annotations

from pydantic import Field, model_validator

from app.config.base import Strict

CLASS_NAME = r"^[A-Za-z0-9_.-]{1,32}$"


class PriorityClass(Strict):
    """One class of requests: its place in the engines' queues and its share of admission."""

    priority: int = Field(
        0,
        ge=-1_000_000,
        le=1_000_000,
        description="vLLM's request priority in the engines of both pools (their "
        "`priority` scheduling): lower runs first.",
    )
    admission_share: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="The share of admission's limits this class is admitted under: a "
        "request of a class at 0.5 is refused once half of `max_waiting` wait, the oldest "
        "has waited half the limit, or its predicted wait passes half the limit, so under "
        "overload the lower classes are shed first and the higher keep the room.",
    )


class PriorityConfig(Strict):
    """Named classes, chosen per request by a header; none: every request alike."""

    classes: dict[str, PriorityClass] = Field(
        default_factory=dict,
        description="Class name -> its priority and admission share, e.g. "
        "`{interactive: {priority: 0}, batch: {priority: 10, admission_share: 0.5}}`. "
        "Empty: no classes, the engines schedule first come first served.",
    )
    default_class: str | None = Field(
        None,
        description="The class of a request that names none (required with classes).",
    )
    header: str = Field(
        "x-priority-class",
        pattern=r"^[A-Za-z0-9-]{1,64}$",
        description="The request header that names a request's class; an unknown class is "
        "a 400 naming the known ones.",
    )

    @model_validator(mode="after")
    def _default_is_a_class(self) -> PriorityConfig:
        import re

        for name in self.classes:
            if not re.match(CLASS_NAME, name):
                raise ValueError(f"priority class name {name!r} must match {CLASS_NAME}")
        if self.classes and self.default_class not in self.classes:
            raise ValueError(
                f"priority.default_class must name one of the classes "
                f"({', '.join(sorted(self.classes))}), not {self.default_class!r}"
            )
        if not self.classes and self.default_class is not None:
            raise ValueError("priority.default_class names a class, but there are none")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.classes)

    def of(self, name: str | None) -> tuple[str, PriorityClass] | None:
        """The class ``name`` names (the default when None); None for an unknown name
        (and always when there are no classes)."""
        if not self.classes:
            return None
        chosen = name if name is not None else self.default_class
        if chosen is None or chosen not in self.classes:
            return None
        return chosen, self.classes[chosen]
