"""``python -m tests.tools.lock``: the image's hashed lock files (:mod:`tests.support.locks`),
resolved with uv from PyPI.

Resolved for CPython 3.11 on Linux, the image's Python: markers are evaluated for the target,
not for the interpreter running this (so redis's ``async-timeout``, needed below Python 3.11.3 as
on Debian bookworm, is kept), and every file PyPI has for a pinned version is hashed (a wheel for
any platform, downloaded by any client, is checked). ``make lock`` runs this; the dev extras are
not locked (they never enter the image).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tests.support.locks import BUILD_LOCK, LOCK, REPO, build_requirements, pins, problems

PYTHON_VERSION: Final = "3.11"
PLATFORM: Final = "linux"
#: uv from the dev extras, next to this interpreter (the venv's ``bin``).
UV: Final = str(Path(sys.executable).with_name("uv"))
_COMPILE: Final = (
    "pip",
    "compile",
    "--quiet",
    "--generate-hashes",
    f"--python-version={PYTHON_VERSION}",
    f"--python-platform={PLATFORM}",
    "--custom-compile-command=make lock",
)
_TIMEOUT_SECONDS: Final = 300.0


def compile_lock(out: Path, *, requirements: Sequence[str] | None = None, uv: str = UV) -> None:
    """Resolve into ``out`` (pins and hashes, for the target) the ``[project.dependencies]`` of
    the ``pyproject.toml`` beside it, or ``requirements`` when given."""
    source = "pyproject.toml" if requirements is None else "-"
    subprocess.run(
        [uv, *_COMPILE, f"--output-file={out.name}", source],
        input=None if requirements is None else "\n".join(requirements) + "\n",
        text=True,
        check=True,
        cwd=out.parent,
        timeout=_TIMEOUT_SECONDS,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m tests.tools.lock", description=__doc__).parse_args(argv)
    compile_lock(REPO / LOCK)
    compile_lock(REPO / BUILD_LOCK, requirements=build_requirements())
    for lock in (LOCK, BUILD_LOCK):
        print(f"{lock}: {len(pins((REPO / lock).read_text()))} pinned packages")
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
