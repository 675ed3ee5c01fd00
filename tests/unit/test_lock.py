"""The lock files `make setup` installs from (scripts/lock) match pyproject.toml: every
requirement of the stack and of the test and bench groups is pinned there, at a version
the requirement admits, with at least one sha256; nothing is pinned twice."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# Left out of the CPU lock on purpose (scripts/lock says why); `make setup` installs
# with --no-deps, so nothing pulls them in.
LEFT_OUT_ON_CPU = {"torchvision", "torchaudio", "torchcodec", "triton"}


def _pins(lock: Path) -> dict[str, tuple[Version, int]]:
    """Each pinned package: its version and how many hashes it carries."""
    pins: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in lock.read_text().splitlines():
        head = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if head:
            name = canonicalize_name(head.group(1))
            assert name not in pins, f"{lock.name} pins {name} twice"
            pins[name] = (Version(head.group(2)), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
        elif line and not line.startswith((" ", "#")):
            pytest.fail(f"{lock.name}: a line that is neither a pin nor a comment: {line!r}")
    return pins


def _requirements(groups: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for group in groups:
        wanted += project["optional-dependencies"][group]
    return [Requirement(text) for text in wanted]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_requirement_is_pinned_with_hashes(device):
    pins = _pins(ROOT / "requirements" / f"{device}.lock")
    for requirement in _requirements((device, "test", "bench")):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{device}.lock lacks {name}: run scripts/lock"
        version = pins[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{device}.lock pins {name} {version}, pyproject asks {requirement.specifier}: "
            "run scripts/lock"
        )
    assert all(hashes for _, hashes in pins.values()), "a pin without a hash"
    if device == "cpu":
        assert not LEFT_OUT_ON_CPU & set(pins), LEFT_OUT_ON_CPU & set(pins)
        assert str(pins["torch"][0]) == "2.13.0+cpu"


def test_pip_itself_is_pinned_with_hashes():
    pins = _pins(ROOT / "requirements" / "pip.lock")
    assert set(pins) == {"pip"} and pins["pip"][1] > 0
