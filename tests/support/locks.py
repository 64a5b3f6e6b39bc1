"""The image's hashed lock files, read: what they pin, and whether they agree with ``pyproject.toml``.

* ``requirements.lock``: ``[project.dependencies]`` and everything they pull in, each pinned with
  ``==`` and the sha256 of every file PyPI has for that version;
* ``requirements-build.lock``: ``[build-system.requires]`` (setuptools), which the Dockerfile
  installs with hashes too before it builds the package without build isolation.

``make lock`` (:mod:`tests.tools.lock`) writes them with uv. :func:`problems` is the offline check a
unit test runs: every requirement of ``pyproject.toml`` is in its lock at a version that satisfies
it, and every entry has hashes. The image builder (:mod:`tests.support.images`) downloads its
wheels from them and the image's SBOM is checked against :func:`pins`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO: Final = Path(__file__).resolve().parents[2]
LOCK: Final = "requirements.lock"
BUILD_LOCK: Final = "requirements-build.lock"
#: ``name==version [; marker] \`` at the start of a line; ``--hash=sha256:…`` lines follow.
_PIN: Final = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")
_HASH: Final = re.compile(r"--hash=sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


def runtime_requirements(*, root: Path = REPO) -> list[str]:
    return list(tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"])


def build_requirements(*, root: Path = REPO) -> list[str]:
    return list(tomllib.loads((root / "pyproject.toml").read_text())["build-system"]["requires"])


def pins(text: str) -> dict[str, Pin]:
    """A lock's entries by canonical name (each ``name==version`` with the hashes under it)."""
    found: dict[str, Pin] = {}
    entry: tuple[str, str] | None = None
    hashes: list[str] = []

    def close() -> None:
        if entry is not None:
            found[canonicalize_name(entry[0])] = Pin(entry[0], entry[1], tuple(hashes))

    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            close()
            entry, hashes = (match["name"], match["version"]), []
        elif entry is not None:
            hashes += _HASH.findall(line)
    close()
    return found


def problems(*, root: Path = REPO) -> list[str]:
    """Why a lock is out of step with ``pyproject.toml``; empty when both agree."""
    found = []
    for lock, requirements in (
        (LOCK, runtime_requirements(root=root)),
        (BUILD_LOCK, build_requirements(root=root)),
    ):
        path = root / lock
        if not path.is_file():
            found.append(f"{lock} is missing: run 'make lock'")
            continue
        locked = pins(path.read_text())
        for text in requirements:
            requirement = Requirement(text)
            pin = locked.get(canonicalize_name(requirement.name))
            if pin is None:
                found.append(f"{lock} has no {requirement.name} (pyproject.toml: {text}): run 'make lock'")
            elif not requirement.specifier.contains(pin.version, prereleases=True):
                found.append(
                    f"{lock} pins {pin.name}=={pin.version}, pyproject.toml wants {text}: run 'make lock'"
                )
        found += [
            f"{lock}: {pin.name}=={pin.version} has no --hash" for pin in locked.values() if not pin.hashes
        ]
    return found
