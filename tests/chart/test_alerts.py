"""The chart's alerts and dashboard: ``promtool check rules`` and ``promtool test rules`` (one unit
test per alert, in ``tests/alerts/alerts_test.yaml``), the metrics they read exist, each alert has a
runbook and a ``runbook_url`` to it, and the chart ships both behind values. promtool comes from
Debian's ``prometheus`` package (``make system-deps``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from agentihooks_swarm import metrics
from tests.chart.conftest import CHART_DIR, REPO_ROOT, Chart, RenderError
from tests.tools.docs import runbooks

RULES: Final = CHART_DIR / "files" / "alerts.yaml"
DASHBOARD: Final = CHART_DIR / "files" / "dashboard.json"
RULE_TESTS: Final = REPO_ROOT / "tests" / "alerts" / "alerts_test.yaml"
METRIC: Final = re.compile(r"\bagentihooks_swarm_[a-z_]+")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: run `make system-deps` (Debian package prometheus)")
    return found


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False)


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def exported() -> set[str]:
    """Every counter (by its exposed name, ``…_total``) and gauge the operator's /metrics can show.

    Read from the metric families, not samples: a labelled counter has no sample until it counts.
    """
    return {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in metrics.Metrics().registry.collect()
        if family.type in ("counter", "gauge")
    }


def test_promtool_check_rules() -> None:
    done = run("check", "rules", str(RULES), cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_promtool_test_rules() -> None:
    done = run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_that_fires_and_one_that_does_not() -> None:
    cases = [
        case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]
    ]
    for alert in alerts():
        mine = [case for case in cases if case["alertname"] == alert["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{alert['alert']}: no case where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{alert['alert']}: no case where it stays quiet"


def test_the_alerts_the_issue_asks_for() -> None:
    names = {alert["alert"] for alert in alerts()}
    assert {
        "AgentihooksSwarmLogsLost",
        "AgentihooksSwarmRefusedPodsKept",
        "AgentihooksSwarmCleanupFailing",
        "AgentihooksSwarmFailureClassSpike",
    } <= names
    for alert in alerts():
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_every_alert_has_a_runbook_page_and_a_runbook_url_to_it() -> None:
    for alert in alerts():
        name = alert["alert"]
        assert (REPO_ROOT / "docs" / "runbooks" / f"{name}.md").is_file(), (
            f"{name}: no docs/runbooks/{name}.md"
        )
        assert alert["annotations"].get("runbook_url") == runbooks.url(name), f"{name}: runbook_url"
    assert runbooks.problems() == []


def test_the_chart_points_runbook_urls_at_the_configured_base(chart: Chart) -> None:
    values = {
        "metrics": {"prometheusRule": {"enabled": True, "runbookBaseUrl": "https://ops.example.com/rb"}}
    }
    rule = chart.render(values).one("PrometheusRule", "rel-alerts")
    rendered = [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]
    assert [r["alert"] for r in rendered] == [a["alert"] for a in alerts()]
    for alert in rendered:
        assert alert["annotations"]["runbook_url"] == f"https://ops.example.com/rb/{alert['alert']}/"
    with pytest.raises(RenderError, match="runbookBaseUrl"):
        chart.render({"metrics": {"prometheusRule": {"enabled": True, "runbookBaseUrl": "runbooks/"}}})


def test_alerts_and_dashboard_read_only_metrics_the_operator_exports() -> None:
    names = exported()
    used_by_alerts = {m for alert in alerts() for m in METRIC.findall(alert["expr"])}
    dashboard = json.loads(DASHBOARD.read_text())
    used_by_dashboard = {
        m
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for m in METRIC.findall(target["expr"])
    }
    assert used_by_alerts <= names, used_by_alerts - names
    assert used_by_dashboard <= names, used_by_dashboard - names
    counters = {n for n in names if n.endswith("_total")}
    assert counters <= used_by_dashboard, f"metrics with no panel: {counters - used_by_dashboard}"


def test_chart_ships_them_behind_values(chart: Chart) -> None:
    default = chart.render()
    assert not default.of("PrometheusRule")
    assert default.find("ConfigMap", "rel-dashboard") is None
    rendered = chart.render(
        {
            "metrics": {
                "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
                "grafanaDashboard": {"enabled": True, "namespace": "monitoring"},
            }
        }
    )
    rule = rendered.one("PrometheusRule", "rel-alerts")
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    board = rendered.one("ConfigMap", "rel-dashboard")
    assert board["metadata"]["namespace"] == "monitoring"
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["agentihooks-swarm.json"]) == json.loads(DASHBOARD.read_text())
