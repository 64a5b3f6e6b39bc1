"""The chart's ``kubeVersion`` is the oldest Kubernetes the tests run (``make test-compat``;
docs/compatibility.md): helm renders the chart for that version and refuses the minor before it.
"""

from __future__ import annotations

import pytest
import yaml

from tests.chart.conftest import CHART_DIR, Chart, RenderError
from tests.support.cluster import COMPAT_KUBERNETES_VERSION

MAJOR, MINOR, _ = (int(part) for part in COMPAT_KUBERNETES_VERSION.removeprefix("v").split("."))


def test_kube_version_is_the_oldest_kubernetes_the_tests_run() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    # "-0" lets pre-releases and vendors' builds (v1.34.1-gke.100) of that minor in.
    assert chart["kubeVersion"] == f">={MAJOR}.{MINOR}.0-0"


def test_helm_renders_for_the_oldest_and_refuses_the_minor_before(chart: Chart) -> None:
    rendered = chart.render(crds=True, kube_version=COMPAT_KUBERNETES_VERSION)
    assert ("CustomResourceDefinition", "executions.swarm.agentihooks.io") in rendered.names()
    assert chart.render(kube_version=f"v{MAJOR}.{MINOR}.0-gke.1").objects

    with pytest.raises(RenderError, match="kubeVersion"):
        chart.render(kube_version=f"v{MAJOR}.{MINOR - 1}.99")
