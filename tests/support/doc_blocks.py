"""The shell blocks of the user pages, each with its mark, and the static check of their names.

Every shell block (a ``bash``, ``sh``, ``shell`` or ``console`` fence) a user page shows is marked
by an HTML comment on the line just before its fence, which the site does not render:

* ``<!-- docs: static -->``: not run here (it needs ``kind``, ``docker``, a registry, a user's
  release…); the names it uses are checked against the repository: every ``make`` target is in
  the Makefile, every ``helm --set`` key in the chart's values.yaml, every ``records`` view and flag
  in the real command's parser, every ``kubectl`` resource of this project in manifests/crds, every
  repository path it names exists.
* ``<!-- docs: runs -->``: run on the local control plane by tests/chart/test_doc_blocks_run.py
  (with :func:`substitutions`), which checks what it prints; checked statically too.
* ``<!-- docs: runs-on-node -->``: the same on the real node (kubelet and containerd: ``kubectl
  exec`` works there), by tests/realnode/test_getting_started.py.

A user page is every page of the site's navigation (``mkdocs.yml``) outside its ``Project``
section, and the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml

REPO: Final = Path(__file__).resolve().parents[2]
SHELLS: Final = frozenset({"bash", "sh", "shell", "console"})
MARKS: Final = frozenset({"static", "runs", "runs-on-node"})
FENCE: Final = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)")
MARK: Final = re.compile(r"^\s*<!--\s*docs:\s*(?P<mark>[\w-]+)\s*-->\s*$")
HOW_TO_MARK: Final = (
    "put `<!-- docs: static -->` (not run here; its names are checked) or `<!-- docs: runs -->` "
    "(run by a test on the test cluster; `runs-on-node` if it needs the real node) on the line just "
    "before the fence, at the fence's indent"
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    mark: str | None
    text: str

    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


#: The nav section of the project's own pages (development, benchmarks…), apart from the user's.
PROJECT = "Project"


def nav_pages(entries: Any) -> Iterator[str]:
    """Each page path under a part of the nav (a list, a mapping of titles, or a path)."""
    if isinstance(entries, str):
        if not entries.startswith(("http://", "https://")):
            yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from nav_pages(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from nav_pages(value)


def _nav(repo: Path) -> list[Any]:
    found: list[Any] = yaml.safe_load((repo / "mkdocs.yml").read_text())["nav"]
    return found


def user_pages(repo: Path = REPO) -> list[Path]:
    """README.md and every page of the site's nav outside its Project section."""
    user = [entry for entry in _nav(repo) if not (isinstance(entry, dict) and PROJECT in entry)]
    return [repo / "README.md", *(repo / "docs" / page for page in nav_pages(user))]


def project_pages(repo: Path = REPO) -> list[str]:
    """The pages of the nav's Project section (the project's own, not a user's)."""
    return [
        page
        for entry in _nav(repo)
        if isinstance(entry, dict) and PROJECT in entry
        for page in nav_pages(entry)
    ]


def blocks(page: Path) -> list[Block]:
    """Each shell block of a page, with the mark on the line before its fence (None if none)."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    number = 0
    while number < len(lines):
        fence = FENCE.match(lines[number])
        if fence is None:
            number += 1
            continue
        end = next(
            (at for at in range(number + 1, len(lines)) if lines[at].strip().startswith("```")), len(lines)
        )
        if fence["lang"] in SHELLS:
            mark = MARK.match(lines[number - 1]) if number else None
            body = "\n".join(line.removeprefix(fence["indent"]) for line in lines[number + 1 : end])
            found.append(Block(page=page, line=number + 1, mark=mark["mark"] if mark else None, text=body))
        number = end + 1
    return found


def commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.split(" #")[0].strip() for line in joined.splitlines() if line.strip()]


@cache
def make_targets(repo: Path = REPO) -> frozenset[str]:
    text = (repo / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*):", text, flags=re.MULTILINE))


@cache
def _values(repo: Path = REPO) -> Any:
    return yaml.safe_load((repo / "charts" / "agentihooks-swarm" / "values.yaml").read_text())


def has_value(key: str, repo: Path = REPO) -> bool:
    node = _values(repo)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@cache
def records_help() -> str:
    """The real ``records`` command's help: its views and flags, as the installed package has them."""
    done = subprocess.run(
        [sys.executable, "-m", "agentihooks_swarm", "records", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def records_views() -> frozenset[str]:
    choices = re.search(r"\{([\w,-]+)\}", records_help())
    assert choices is not None, records_help()
    return frozenset(choices[1].split(","))


def records_flags() -> frozenset[str]:
    return frozenset(re.findall(r"(?<![\w-])(--[\w-]+)", records_help()))


@cache
def crd_resources(repo: Path = REPO) -> frozenset[str]:
    """The names kubectl takes for this project's kinds: plural, singular, short names, kind."""
    found: set[str] = set()
    for path in sorted((repo / "manifests" / "crds").glob("*.yaml")):
        names = yaml.safe_load(path.read_text())["spec"]["names"]
        found |= {names["plural"], names["singular"], names["kind"].lower(), *names.get("shortNames", [])}
    return frozenset(found)


#: Names close to this project's kinds that a renamed CRD would leave behind in a page.
PROJECT_WORDS: Final = re.compile(r"^(exec\w*|swarms?)$")
KUBECTL_RESOURCE: Final = re.compile(
    r"\bkubectl\s+(?:get|describe|delete|wait|edit|patch)\s+(?P<what>[\w.]+)"
)
REPO_PATH: Final = re.compile(r"(?<![\w/.-])((?:manifests|charts|docs|tests)/[\w./-]*[\w/])")


def problems(block: Block, repo: Path = REPO) -> list[str]:
    """What in the block names something the repository does not have."""
    found: list[str] = []
    for command in commands(block.text):
        for target in re.findall(r"(?:^|[;&|(]\s*)make\s+([\w-]+)", command):
            if target not in make_targets(repo):
                found.append(f"make target {target!r} is not in the Makefile")
        if re.search(r"\bhelm\s+(install|upgrade|template)\b", command):
            for key in re.findall(r"--set(?:-string)?[ =]([\w.]+)=", command):
                if not has_value(key, repo):
                    found.append(f"helm value {key!r} is not in charts/agentihooks-swarm/values.yaml")
        records = re.search(r"-m agentihooks_swarm records\s+(\S+)(.*)", command)
        if records:
            if records[1] not in records_views():
                found.append(f"records view {records[1]!r} is not one of {sorted(records_views())}")
            for flag in re.findall(r"(?<![\w-])(--[\w-]+)", records[2]):
                if flag not in records_flags():
                    found.append(f"records flag {flag!r} is not one of {sorted(records_flags())}")
        for what in KUBECTL_RESOURCE.findall(command):
            for name in what.split(","):
                if PROJECT_WORDS.match(name) and name not in crd_resources(repo):
                    found.append(f"kubectl resource {name!r} is not a name of manifests/crds")
        for path in REPO_PATH.findall(command):
            if not (repo / path.rstrip("/")).exists():
                found.append(f"path {path!r} is not in the repository")
    return [f"{block.where()}: {problem}" for problem in found]


def unmarked(pages: list[Path]) -> list[str]:
    bad = [block for page in pages for block in blocks(page) if block.mark not in MARKS]
    return [f"{block.where()}: shell block without a mark ({block.mark!r}); {HOW_TO_MARK}" for block in bad]


#: What a test changes in a ``runs`` block before it runs it on the test cluster, in one place:
#: the page's namespaces become the test's own (one namespace a test, deleted after it), and the
#: runbooks' placeholders the chart's names. Nothing else of the command changes.
def substitutions(*, namespace: str, release: str = "agentihooks-swarm") -> dict[str, str]:
    return {
        "RELEASE_NAMESPACE": namespace,
        "WORKER_NAMESPACE": f"{namespace}-workers",
        "RELEASE-": f"{release}-",
        "-n swarm-workers": f"-n {namespace}-workers",
        "-n swarm ": f"-n {namespace} ",
    }


def substituted(text: str, replacements: dict[str, str]) -> str:
    for placeholder, value in replacements.items():
        text = text.replace(placeholder, value)
    return text


def runnable(pages: list[Path], *, mark: str = "runs") -> list[Block]:
    return [block for page in pages for block in blocks(page) if block.mark == mark]


def run(
    block: Block,
    *,
    kubeconfig: Path,
    bin_dir: Path,
    image: str,
    replacements: dict[str, str],
    home: Path,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``block`` as a user runs it, ``replacements`` made in its text: ``bash -euo pipefail`` in the
    repository, on ``kubeconfig``'s cluster with ``bin_dir``'s kubectl and helm first on the PATH,
    helm's homes under ``home`` and ``$IMAGE`` set to ``image``. What it printed is returned, not
    judged."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "IMAGE": image,
        **{f"HELM_{part}_HOME": str(home / part.lower()) for part in ("CACHE", "CONFIG", "DATA")},
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", substituted(block.text, replacements)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@cache
def printer_headers(repo: Path = REPO) -> tuple[tuple[str, ...], ...]:
    """The header ``kubectl get`` prints for each kind of manifests/crds: NAME, then its columns."""
    found = []
    for path in sorted((repo / "manifests" / "crds").glob("*.yaml")):
        for version in yaml.safe_load(path.read_text())["spec"]["versions"]:
            columns = version.get("additionalPrinterColumns", [])
            found.append(("NAME", *(column["name"].upper() for column in columns)))
    return tuple(found)


#: A header of this project's kinds as a page shows ``kubectl get``'s output: NAME, then a column
#: of the CRDs' (a page may show the first columns only).
HEADER: Final = re.compile(r"^\s*NAME\s+(SWARM|IMAGE)\s.*$")


def header_problems(page: Path, repo: Path = REPO) -> list[str]:
    """Each ``kubectl get`` header of a page that is not the start of a CRD's printer columns."""
    found = []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if HEADER.match(line):
            words = tuple(line.split())
            if not any(header[: len(words)] == words for header in printer_headers(repo)):
                found.append(
                    f"{page.name}:{number}: columns {' '.join(words)} are not a CRD's printer columns"
                )
    return found
