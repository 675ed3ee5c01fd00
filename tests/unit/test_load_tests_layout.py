"""load_tests/ as a house of its own: packages by job, none crowded; no benchmark imports the
tests; every benchmark a user runs has its `make` target, and every target's module
imports and runs as a script."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOAD_TESTS = ROOT / "load_tests"
MOST_MODULES = 8
# The packages whose modules are benchmarks a user runs.
BENCHMARKS = ("serving", "kv", "reliability", "planning")


def _modules() -> list[Path]:
    return sorted(p for p in LOAD_TESTS.rglob("*.py") if p.name != "__init__.py")


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _make_targets() -> dict[str, str]:
    """Each module a Makefile recipe runs with ``-m``, and its target."""
    targets: dict[str, str] = {}
    target = ""
    for line in (ROOT / "Makefile").read_text().splitlines():
        head = re.match(r"^([a-z][\w -]*):", line)
        if head:
            target = head.group(1)
        for module in re.findall(r"-m (load_tests\.[\w.]+)", line):
            targets[module] = target
    return targets


def test_no_level_is_crowded():
    for folder in [LOAD_TESTS, *(p for p in LOAD_TESTS.iterdir() if p.is_dir())]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MOST_MODULES, f"{folder}: {len(modules)} modules"


def test_no_module_imports_the_tests():
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n == "tests" or n.startswith("tests.") for n in names), (
                f"{path.relative_to(ROOT)} imports {names}"
            )


def test_every_benchmark_has_a_make_target():
    targets = _make_targets()
    runnable = [
        _dotted(p)
        for package in BENCHMARKS
        for p in sorted((LOAD_TESTS / package).glob("*.py"))
        if p.name != "__init__.py"
    ]
    missing = [m for m in runnable if m not in targets]
    assert not missing, f"benchmarks without a make target: {missing}"


@pytest.mark.parametrize("module", sorted(_make_targets()))
def test_every_targets_module_imports_and_runs_as_a_script(module):
    loaded = importlib.import_module(module)
    source = Path(str(loaded.__file__)).read_text()
    assert 'if __name__ == "__main__":' in source, f"{module} does not run with -m"
