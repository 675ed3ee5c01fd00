"""The README's list of `args` fields names every field of the config schema."""

from pathlib import Path

from pydantic import BaseModel

from app.config import AppConfig

README = Path(__file__).parents[2] / "README.md"


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        names.append(prefix + name)
        annotation = info.annotation
        for kind in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names += _fields(kind, f"{prefix}{name}.")
    return names


def test_every_config_field_is_documented_in_the_readme():
    text = README.read_text()
    section = text[text.index("## Configuration") : text.index("## Running a real model")]
    missing = [f for f in _fields(AppConfig) if f"`{f.rsplit('.', 1)[-1]}`" not in section]
    assert not missing, f"README's configuration section lacks {missing}"
