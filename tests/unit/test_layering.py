"""The packages of ``app/`` in layers: a module imports only from its own layer or the
layers below it, so each can be read, tested and changed without those above it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"

# Lowest first. Within a layer the members do not import each other, but for the last
# (planning and replay answer the same question together: trace advice runs replay's
# profiles, replay reads planning's SLO).
LAYERS: list[set[str]] = [
    {"net", "host", "cpu_affinity", "private_dir", "model", "routing", "scaling"},
    {"config"},
    {"observability"},
    {"kv"},
    {"pool"},
    {"engine"},
    {"flow"},
    {"api"},
    {"planning", "replay"},
    {"cli"},
]
LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def _unit(path: Path) -> str:
    """The package (or top-level module) of ``app/`` that ``path`` belongs to."""
    return path.relative_to(APP).parts[0].removesuffix(".py")


def _imported_units(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "app" and len(parts) > 1 and parts[1] in LEVEL:
                found.add(parts[1])
    return found


def _edges() -> list[tuple[str, str, str]]:
    edges = []
    for path in sorted(APP.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == APP:
            continue
        unit = _unit(path)
        for imported in _imported_units(path) - {unit}:
            edges.append((str(path.relative_to(ROOT)), unit, imported))
    return edges


def test_every_package_has_a_layer():
    units = {_unit(p) for p in APP.rglob("*.py") if p != APP / "__init__.py"}
    assert units <= set(LEVEL), f"packages with no layer: {units - set(LEVEL)}"


def test_no_package_imports_one_above_it():
    upward = [
        f"{path}: {unit} (layer {LEVEL[unit]}) imports {imported} (layer {LEVEL[imported]})"
        for path, unit, imported in _edges()
        if LEVEL[imported] > LEVEL[unit]
    ]
    assert not upward, "\n".join(upward)


def test_a_layer_s_members_do_not_import_each_other():
    across = [
        f"{path}: {unit} imports {imported}"
        for path, unit, imported in _edges()
        if LEVEL[imported] == LEVEL[unit] and LEVEL[unit] != LEVEL["planning"]
    ]
    assert not across, "\n".join(across)
