"""``python -m tests.tools.version [--check]``: one version, written from ``pyproject.toml``.

The package's version in ``pyproject.toml`` is the one source. ``make version`` writes it into the
chart (``Chart.yaml``'s ``version`` and ``appVersion``: the chart ships the operator, and
``appVersion`` is the image's default tag) and into the image tags the README and the docs tell
people to build. ``--check`` (run by ``make lint``) writes nothing and fails when one of those
differs, or when ``CHANGELOG.md`` has no section for the version.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
PYPROJECT: Final = "pyproject.toml"
CHART: Final = "charts/agentihooks-swarm/Chart.yaml"
CHANGELOG: Final = "CHANGELOG.md"
#: ``version: …`` and ``appVersion: …`` at the top level of Chart.yaml.
_CHART_FIELDS: Final = re.compile(
    r'^(?P<field>version|appVersion): *"?(?P<value>[^"\s]*)"?[ \t]*$', re.MULTILINE
)
#: The operator image with a version tag, as the build and install instructions write it.
_IMAGE_TAG: Final = re.compile(
    r"(?P<image>ghcr\.io/agentihooks/agentihooks-swarm):(?P<tag>\d+\.\d+\.\d+\S*?)(?=[\s`'\"]|$)"
)


def version(*, root: Path = REPO) -> str:
    return str(tomllib.loads((root / PYPROJECT).read_text())["project"]["version"])


def tagged(root: Path = REPO) -> Iterator[Path]:
    """The files that name the image with a version tag."""
    yield root / "README.md"
    yield root / "Dockerfile"
    yield from sorted((root / "docs").rglob("*.md"))


def _chart_text(text: str, want: str) -> str:
    def field(match: re.Match[str]) -> str:
        value = want if match["field"] == "version" else f'"{want}"'
        return f"{match['field']}: {value}"

    return _CHART_FIELDS.sub(field, text)


def problems(*, root: Path = REPO) -> list[str]:
    """Each copy of the version that differs from pyproject.toml's; empty when all agree."""
    want = version(root=root)
    found = []
    chart = {m["field"]: m["value"] for m in _CHART_FIELDS.finditer((root / CHART).read_text())}
    for field in ("version", "appVersion"):
        if chart.get(field) != want:
            found.append(f"{CHART}: {field} is {chart.get(field)!r}, {PYPROJECT} says {want!r}")
    for path in tagged(root):
        for match in _IMAGE_TAG.finditer(path.read_text()):
            if match["tag"] != want:
                found.append(f"{path.relative_to(root)}: {match[0]} ({PYPROJECT} says {want!r})")
    changelog = (root / CHANGELOG).read_text() if (root / CHANGELOG).exists() else ""
    if not re.search(rf"^## \[{re.escape(want)}\]", changelog, re.MULTILINE):
        found.append(f"{CHANGELOG} has no section '## [{want}] - DATE': write one for this version")
    return found


def write(*, root: Path = REPO) -> list[Path]:
    """Write the version wherever it is copied; the files changed."""
    want = version(root=root)
    changed = []
    chart = root / CHART
    for path, text in [
        (chart, _chart_text(chart.read_text(), want)),
        *((path, _IMAGE_TAG.sub(rf"\g<image>:{want}", path.read_text())) for path in tagged(root)),
    ]:
        if path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.version", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; fail when a copy differs")
    args = parser.parse_args(argv)
    if not args.check:
        for path in write():
            print(f"version: wrote {version()} into {path.relative_to(REPO)}")
    found = problems()
    for problem in found:
        print(f"version: {problem}", file=sys.stderr)
    if found and args.check:
        print(
            f"version: `make version` copies {PYPROJECT}'s version; the changelog is written by hand",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
