"""One version: pyproject.toml's, copied into the chart and the image tags the docs give."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.tools import version

CHART = """apiVersion: v2
name: agentihooks-swarm
version: 0.1.0
# The operator's version (pyproject.toml); the default image tag.
appVersion: "0.1.0"
kubeVersion: ">=1.25.0-0"
"""


def tree(root: Path, *, package: str, changelog: str = "## [0.2.0] - 2027-01-01\n") -> None:
    (root / "charts" / "agentihooks-swarm").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "pyproject.toml").write_text(f'[project]\nname = "agentihooks-swarm"\nversion = "{package}"\n')
    (root / "charts" / "agentihooks-swarm" / "Chart.yaml").write_text(CHART)
    (root / "README.md").write_text("docker build -t ghcr.io/agentihooks/agentihooks-swarm:0.1.0 .\n")
    (root / "Dockerfile").write_text("#   docker build -t ghcr.io/agentihooks/agentihooks-swarm:0.1.0 .\n")
    (root / "docs" / "operations.md").write_text("`ghcr.io/agentihooks/agentihooks-swarm:0.1.0`\n")
    (root / "CHANGELOG.md").write_text(changelog)


def test_the_repository_has_one_version() -> None:
    assert version.problems() == []
    chart = yaml.safe_load((version.REPO / version.CHART).read_text())
    assert chart["version"] == chart["appVersion"] == version.version()


def test_a_new_package_version_is_reported_everywhere_it_is_copied_until_written(tmp_path: Path) -> None:
    tree(tmp_path, package="0.2.0")

    assert version.problems(root=tmp_path) == [
        "charts/agentihooks-swarm/Chart.yaml: version is '0.1.0', pyproject.toml says '0.2.0'",
        "charts/agentihooks-swarm/Chart.yaml: appVersion is '0.1.0', pyproject.toml says '0.2.0'",
        "README.md: ghcr.io/agentihooks/agentihooks-swarm:0.1.0 (pyproject.toml says '0.2.0')",
        "Dockerfile: ghcr.io/agentihooks/agentihooks-swarm:0.1.0 (pyproject.toml says '0.2.0')",
        "docs/operations.md: ghcr.io/agentihooks/agentihooks-swarm:0.1.0 (pyproject.toml says '0.2.0')",
    ]
    assert len(version.write(root=tmp_path)) == 4
    assert version.problems(root=tmp_path) == []
    chart = (tmp_path / version.CHART).read_text()
    assert "version: 0.2.0\n# The operator's version" in chart  # The comment between them stays.
    assert yaml.safe_load(chart)["appVersion"] == "0.2.0"
    assert (
        tmp_path / "README.md"
    ).read_text() == "docker build -t ghcr.io/agentihooks/agentihooks-swarm:0.2.0 .\n"


def test_a_version_without_a_changelog_section_fails(tmp_path: Path) -> None:
    tree(tmp_path, package="0.1.0", changelog="## [Unreleased]\n")
    assert version.problems(root=tmp_path) == [
        "CHANGELOG.md has no section '## [0.1.0] - DATE': write one for this version"
    ]
