"""The configuration reference (docs/configuration.md) names every field of the config
schema, and the defaults it gives in brackets are the schema's."""

import enum
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from app.config import AppConfig

REFERENCE = Path(__file__).parents[2] / "docs" / "configuration.md"


def _section() -> str:
    return REFERENCE.read_text()


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        names.append(prefix + name)
        annotation = info.annotation
        for kind in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names += _fields(kind, f"{prefix}{name}.")
    return names


def _leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo]]:
    found = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        nested = [
            k
            for k in (annotation, *getattr(annotation, "__args__", ()))
            if isinstance(k, type) and issubclass(k, BaseModel)
        ]
        if nested:
            for kind in nested:
                found += _leaves(kind, f"{prefix}{name}.")
        else:
            found.append((prefix + name, info))
    return found


_NO_VALUE = object()


def _literal(bracket: str) -> Any:
    """The value a README bracket states, or _NO_VALUE when it describes one in words
    (``[vLLM's]``, ``[the model's]``, ``[pools 128, ingress -1: none]``)."""
    text = bracket.strip()
    if text in ("true", "false"):
        return text == "true"
    if text == "none" or text.startswith("none:"):
        return None
    if match := re.fullmatch(r"`([^`]+)`", text):
        return match.group(1)
    if match := re.fullmatch(r"(-?\d+(?:\.\d+)?)( MiB)?", text):
        number = float(match.group(1))
        return number * (1 << 20) if match.group(2) else number
    return _NO_VALUE


def test_every_config_field_is_documented_in_the_readme():
    section = _section()
    missing = [f for f in _fields(AppConfig) if f"`{f.rsplit('.', 1)[-1]}`" not in section]
    assert not missing, f"README's configuration section lacks {missing}"


def test_the_readme_s_defaults_are_the_schema_s():
    """For each field whose name appears once in the list, the first bracket after it
    (before the next field's name) must state the schema's default, where it states a
    value at all."""
    section = _section()
    section = section[section.index("`args` fields") :]
    names = {path.rsplit(".", 1)[-1] for path in _fields(AppConfig)}
    checked, wrong = 0, []
    for path, info in _leaves(AppConfig):
        leaf = path.rsplit(".", 1)[-1]
        default = info.default
        if isinstance(default, enum.Enum):
            default = default.value
        if section.count(f"`{leaf}`") != 1 or not (
            default is None or isinstance(default, bool | int | float | str)
        ):
            continue
        after = section[section.index(f"`{leaf}`") + len(leaf) + 2 :]
        others = [
            m.start() for m in re.finditer(r"`([a-z_]+)`", after) if m.group(1) in names - {leaf}
        ]
        bracket = re.search(r"\[([^\]]*)\]", after[: min([*others, len(after)])])
        stated = _literal(bracket.group(1)) if bracket else _NO_VALUE
        if stated is _NO_VALUE:
            continue
        checked += 1
        if isinstance(stated, float) and not isinstance(default, bool):
            same = isinstance(default, int | float) and stated == float(default)
        else:
            same = stated == default
        if not same:
            wrong.append(
                f"{path}: README [{bracket.group(1) if bracket else ''}], schema {default!r}"
            )
    assert not wrong, "README's defaults differ from the schema's:\n" + "\n".join(wrong)
    assert checked >= 40, checked  # the check reads the list it means to
