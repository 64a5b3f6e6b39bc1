"""The image's lock files (``make lock``, tests/tools/lock.py) agree with ``pyproject.toml``: a
dependency added or changed without re-locking fails here, offline, before any image is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import locks

#: A lock entry as uv writes it: the pin, its hashes on continuation lines, then the annotation.
_ENTRY = "{name}=={version} \\\n    --hash=sha256:{a} \\\n    --hash=sha256:{b}\n    # via x\n"


def _entry(name: str, version: str) -> str:
    return _ENTRY.format(name=name, version=version, a="a" * 64, b="b" * 64)


def _project(root: Path, *, dependencies: list[str], build: list[str]) -> None:
    quoted = ", ".join(f'"{d}"' for d in dependencies)
    backend = ", ".join(f'"{b}"' for b in build)
    (root / "pyproject.toml").write_text(
        f'[build-system]\nrequires = [{backend}]\n\n[project]\nname = "x"\ndependencies = [{quoted}]\n'
    )


def test_the_repositorys_locks_agree_with_pyproject() -> None:
    assert locks.problems() == []
    pinned = locks.pins((locks.REPO / locks.LOCK).read_text())
    for name in ("kopf", "kubernetes-asyncio", "redis", "pydantic", "prometheus-client"):
        assert name in pinned, sorted(pinned)
    # Resolved for the image's Python 3.11.2 (Debian bookworm), not only the host's.
    assert "async-timeout" in pinned
    # Only the runtime dependencies: no test tool is locked into the image.
    assert not {"pytest", "mypy", "ruff", "uv", "pip-audit", "cyclonedx-bom"} & set(pinned)
    assert set(locks.pins((locks.REPO / locks.BUILD_LOCK).read_text())) == {"setuptools"}


def test_pins_reads_names_versions_markers_and_hashes() -> None:
    text = "# header\n" + _entry("Foo_Bar", "1.2") + "baz==3.0 ; python_full_version < '3.11.3' \\\n"
    text += f"    --hash=sha256:{'c' * 64}\n"
    assert locks.pins(text) == {
        "foo-bar": locks.Pin("Foo_Bar", "1.2", (f"--hash=sha256:{'a' * 64}", f"--hash=sha256:{'b' * 64}")),
        "baz": locks.Pin("baz", "3.0", (f"--hash=sha256:{'c' * 64}",)),
    }


@pytest.mark.parametrize(
    ("dependencies", "runtime_lock", "expected"),
    [
        (["kopf>=1.45,<2"], _entry("kopf", "1.45.2"), []),
        (["kopf>=1.45,<2", "redis>=6.2"], _entry("kopf", "1.45.2"), ["requirements.lock has no redis"]),
        (
            ["kopf>=2"],
            _entry("kopf", "1.45.2"),
            ["requirements.lock pins kopf==1.45.2, pyproject.toml wants"],
        ),
        (["kopf"], "kopf==1.45.2\n    # via x\n", ["requirements.lock: kopf==1.45.2 has no --hash"]),
    ],
)
def test_problems_name_what_is_out_of_step(
    tmp_path: Path, dependencies: list[str], runtime_lock: str, expected: list[str]
) -> None:
    _project(tmp_path, dependencies=dependencies, build=["setuptools>=68"])
    (tmp_path / locks.LOCK).write_text(runtime_lock)
    (tmp_path / locks.BUILD_LOCK).write_text(_entry("setuptools", "80.0"))
    found = locks.problems(root=tmp_path)
    assert len(found) == len(expected), found
    for problem, start in zip(found, expected, strict=True):
        assert problem.startswith(start), found


def test_a_missing_lock_is_a_problem(tmp_path: Path) -> None:
    _project(tmp_path, dependencies=["kopf"], build=["setuptools>=68"])
    (tmp_path / locks.LOCK).write_text(_entry("kopf", "1.45.2"))
    assert locks.problems(root=tmp_path) == ["requirements-build.lock is missing: run 'make lock'"]
