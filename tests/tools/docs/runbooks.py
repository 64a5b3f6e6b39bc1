"""The runbooks: one hand-written page per alert of the chart, and the generated index of them.

Each alert in ``charts/agentihooks-swarm/files/alerts.yaml`` has ``docs/runbooks/<alert>.md`` and
an annotation ``runbook_url`` that points at it on the documentation site: the chart's default
``metrics.prometheusRule.runbookBaseUrl`` followed by ``<alert>/``. The chart's PrometheusRule sets
the same annotation from the value, so a site hosted elsewhere only needs that value.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from tests.tools.docs import markdown

REPO: Final = Path(__file__).resolve().parents[3]
ALERTS: Final = REPO / "charts" / "agentihooks-swarm" / "files" / "alerts.yaml"
VALUES: Final = REPO / "charts" / "agentihooks-swarm" / "values.yaml"
MKDOCS: Final = REPO / "mkdocs.yml"
RUNBOOKS: Final = REPO / "docs" / "runbooks"
INDEX: Final = "index.md"


def alerts(path: Path = ALERTS) -> list[Mapping[str, Any]]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def base_url() -> str:
    """The chart's default runbook base, ending in ``/``."""
    url = str(yaml.safe_load(VALUES.read_text())["metrics"]["prometheusRule"]["runbookBaseUrl"])
    return url.rstrip("/") + "/"


def url(alert: str, *, base: str | None = None) -> str:
    return (base or base_url()) + alert + "/"


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def problems(*, alerts_file: Path = ALERTS, runbooks: Path = RUNBOOKS) -> list[str]:
    """What is missing or wrong between the alerts and their runbooks; empty when all is well."""
    found = []
    site = str(yaml.safe_load(MKDOCS.read_text())["site_url"]).rstrip("/") + "/"
    if base_url() != site + "runbooks/":
        found.append(
            f"{_shown(VALUES)}: metrics.prometheusRule.runbookBaseUrl is {base_url()!r}, "
            f"but the site's runbooks are at {site}runbooks/ (mkdocs.yml site_url)"
        )
    names = set()
    for alert in alerts(alerts_file):
        name = str(alert["alert"])
        names.add(name)
        page = runbooks / f"{name}.md"
        if not page.exists():
            found.append(f"alert {name} has no runbook: write {_shown(page)}")
        have = alert.get("annotations", {}).get("runbook_url")
        if have != url(name):
            found.append(
                f"alert {name} in {_shown(alerts_file)}: annotation runbook_url is {have!r}, "
                f"expected {url(name)!r}"
            )
    for page in sorted(runbooks.glob("*.md")):
        if page.name != INDEX and page.stem not in names:
            found.append(f"{_shown(page)} is the runbook of no alert in {_shown(alerts_file)}")
    return found


def page() -> str:
    rows = [
        [
            f"[{alert['alert']}]({alert['alert']}.md)",
            str(alert.get("labels", {}).get("severity", "")),
            markdown.cell(str(alert.get("annotations", {}).get("summary", ""))),
            f"`{alert['for']}`" if "for" in alert else "at once",
        ]
        for alert in alerts()
    ]
    return "\n".join(
        [
            "# Runbooks",
            "",
            *markdown.generated(source="`charts/agentihooks-swarm/files/alerts.yaml`"),
            "One page per alert of the chart's PrometheusRule (`metrics.prometheusRule.enabled`). Each "
            "alert's `runbook_url` annotation points at its page here; set "
            "`metrics.prometheusRule.runbookBaseUrl` when you host these pages elsewhere.",
            "",
            "In their commands, `RELEASE` is the Helm release, `RELEASE_NAMESPACE` its namespace, "
            "`WORKER_NAMESPACE` the namespace of the Swarms and Executions (`RELEASE_NAMESPACE-workers` by "
            "default), `SLUG` the Swarm's name and `EXECUTION` the Execution's. The controller's leader is "
            "the Pod the Lease `RELEASE-controller` names (its holder is `POD-PID`). The `records` reads run "
            "in the records reader's Pod, `RELEASE-records-0`, read-only and without a ServiceAccount token "
            "([who can read the records](../security.md#who-can-read-the-records)); the controller's "
            "container (`deployment/RELEASE-controller -c controller`) runs them too, with its credentials.",
            "",
            *markdown.table(["Alert", "Severity", "Summary", "Fires after"], rows),
            "",
        ]
    )
