"""The documentation's generated reference pages, and the check that they match their sources.

``python -m tests.tools.docs`` (``make docs``) writes each page of :data:`PAGES` from the live
code and files it documents: the CRD schemas, the ``Settings`` model, the chart's values and
schema, the metrics registry and the alerts. ``--check`` (run by ``make lint``) writes nothing and
fails, naming the page and the command, when a committed page differs from what its source gives
now, when an alert has no runbook, or when a reference page would show a blank (:func:`gaps`: a
CRD field or a Helm value without a description, a metric label without its values). The site
itself is MkDocs (``mkdocs.yml``).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from tests.tools.docs import crds, metrics, runbooks, settings, values

REPO: Final = Path(__file__).resolve().parents[3]
COMMAND: Final = "make docs"


@dataclasses.dataclass(frozen=True)
class Page:
    path: str  # relative to the repository
    source: str  # what the page is generated from, for the messages
    render: Callable[[], str]


PAGES: Final = (
    Page("docs/reference/crds.md", "manifests/crds/", crds.page),
    Page("docs/reference/settings.md", "operator/agentihooks_swarm/settings.py", settings.page),
    Page(
        "docs/reference/helm-values.md",
        "charts/agentihooks-swarm/values.schema.json and values.yaml",
        values.page,
    ),
    Page("docs/reference/metrics.md", "operator/agentihooks_swarm/metrics.py", metrics.page),
    Page("docs/runbooks/index.md", "charts/agentihooks-swarm/files/alerts.yaml", runbooks.page),
)


def write(*, pages: Sequence[Page] = PAGES, root: Path = REPO) -> list[str]:
    """Write every page whose text changed; the paths written."""
    written = []
    for page in pages:
        target = root / page.path
        text = page.render()
        if not target.exists() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            written.append(page.path)
    return written


def gaps() -> list[str]:
    """What a reference page would leave blank: each names its source and what to write there."""
    return [*crds.missing(), *values.missing(), *metrics.missing()]


def stale(*, pages: Sequence[Page] = PAGES, root: Path = REPO) -> list[str]:
    """One message per page that differs from what its source gives now, with the first lines of the diff."""
    found = []
    for page in pages:
        target = root / page.path
        want = page.render()
        if not target.exists():
            found.append(f"{page.path} is missing: run `{COMMAND}` and commit it")
            continue
        have = target.read_text()
        if have != want:
            diff = difflib.unified_diff(
                have.splitlines(),
                want.splitlines(),
                f"{page.path} (committed)",
                f"{page.path} (from {page.source})",
                n=0,
                lineterm="",
            )
            excerpt = "\n".join(f"    {line}" for line in list(diff)[:12])
            found.append(
                f"{page.path} is stale: {page.source} has changed under it. Run `{COMMAND}` "
                f"(python -m tests.tools.docs) and commit the page.\n{excerpt}"
            )
    return found
