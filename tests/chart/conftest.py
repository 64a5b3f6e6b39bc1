"""Rendering the chart with the real ``helm`` binary, for the tests in this folder.

``helm`` comes from ``tests/tools/binaries/build.sh`` (it prints the bin directory; the build runs once
and is cached). :class:`Chart` renders ``charts/agentihooks-swarm`` with a values mapping and
returns the parsed objects; an invalid values set returns helm's error instead.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
CHART_DIR: Final = REPO_ROOT / "charts" / "agentihooks-swarm"
BUILD_SCRIPT: Final = REPO_ROOT / "tests" / "tools" / "binaries" / "build.sh"
RELEASE: Final = "rel"
NAMESPACE: Final = "ns"

Object = dict[str, Any]


def bin_dir() -> Path:
    """The directory with ``helm`` and ``kubectl`` (built once by build.sh)."""
    done = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


class RenderError(Exception):
    """helm refused the values (schema, `required`) or failed to render."""


@dataclasses.dataclass(frozen=True)
class Rendered:
    objects: list[Object]

    def names(self) -> set[tuple[str, str]]:
        """Every object as (kind, name)."""
        return {(o["kind"], o["metadata"]["name"]) for o in self.objects}

    def of(self, kind: str) -> list[Object]:
        return [o for o in self.objects if o["kind"] == kind]

    def find(self, kind: str, name: str) -> Object | None:
        return next((o for o in self.of(kind) if o["metadata"]["name"] == name), None)

    def one(self, kind: str, name: str) -> Object:
        found = self.find(kind, name)
        assert found is not None, f"no {kind} {name} in {sorted(self.names())}"
        return found

    def controller(self) -> Object:
        """The controller Deployment's container ``controller``."""
        spec = self.one("Deployment", f"{RELEASE}-controller")["spec"]["template"]["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == "controller"]
        return dict(container)

    def env(self) -> dict[str, Object]:
        return {e["name"]: e for e in self.controller().get("env", [])}


@dataclasses.dataclass(frozen=True)
class Chart:
    helm: Path
    workdir: Path

    def _run(self, *args: str, values: Mapping[str, Any] | None) -> subprocess.CompletedProcess[str]:
        values_file = self.workdir / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values or {})))
        return subprocess.run(
            [str(self.helm), *args, "--namespace", NAMESPACE, "--values", str(values_file)],
            capture_output=True,
            text=True,
            check=False,
        )

    def render(
        self, values: Mapping[str, Any] | None = None, *, crds: bool = False, kube_version: str | None = None
    ) -> Rendered:
        """``kube_version`` is the cluster's version helm assumes (and checks ``kubeVersion`` against)."""
        args = ["template", RELEASE, str(CHART_DIR), *(["--include-crds"] if crds else [])]
        args += ["--kube-version", kube_version] if kube_version else []
        done = self._run(*args, values=values)
        if done.returncode != 0:
            raise RenderError(done.stderr)
        return Rendered([o for o in yaml.safe_load_all(done.stdout) if o])

    def notes(self, values: Mapping[str, Any] | None = None, *, is_upgrade: bool = False) -> str:
        """NOTES.txt as `helm install --dry-run=client` prints it, or as an upgrade would.

        helm prints NOTES only for an install or a real upgrade; for ``is_upgrade`` a copy of the
        chart renders NOTES.txt into a ConfigMap with ``helm template --is-upgrade`` instead.
        """
        if not is_upgrade:
            done = self._run("install", RELEASE, str(CHART_DIR), "--dry-run=client", values=values)
            assert done.returncode == 0, done.stderr
            return done.stdout.split("NOTES:", 1)[1]
        copy = self.workdir / "chart-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(CHART_DIR, copy)
        (copy / "notes.txt").write_text((CHART_DIR / "templates" / "NOTES.txt").read_text())
        (copy / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n"
            '{{ tpl (.Files.Get "notes.txt") . | indent 4 }}\n'
        )
        args = ("template", RELEASE, str(copy), "--is-upgrade", "--show-only", "templates/zz-notes.yaml")
        done = self._run(*args, values=values)
        assert done.returncode == 0, done.stderr
        notes: str = yaml.safe_load(done.stdout)["data"]["notes"]
        return notes

    def lint(self, values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        return self._run("lint", "--strict", str(CHART_DIR), values=values)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build helm before any test runs when a chart test will (a cold build outlasts a test's
    timeout; the cluster fixtures build only what a kwok cluster runs)."""
    here = Path(__file__).parent
    if not session.config.option.collectonly and any(here in item.path.parents for item in session.items):
        bin_dir()


@pytest.fixture(scope="session")
def helm() -> Path:
    return bin_dir() / "helm"


@pytest.fixture
def chart(helm: Path, tmp_path: Path) -> Chart:
    return Chart(helm=helm, workdir=tmp_path)


def rules(role: Object) -> set[tuple[str, str, str, str]]:
    """A Role's or ClusterRole's rules as (apiGroup, resource, verb, resourceName) tuples."""
    found: set[tuple[str, str, str, str]] = set()
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or ["*"]:
                        found.add((group, resource, verb, name))
    return found
