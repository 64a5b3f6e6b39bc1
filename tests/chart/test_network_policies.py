"""The chart's NetworkPolicies: the bundled Redis open only to the controller, the records reader and
the workers; the metrics port only to networkPolicy.metrics.from; a worker's terminal only to
networkPolicy.workers.terminalFrom. Rendered here, and accepted by the real API server (a server
dry run with strict field validation)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.chart.conftest import NAMESPACE, RELEASE, Chart, Object
from tests.support.cluster import ControlPlane

OWNED: Final = {"matchExpressions": [{"key": "swarm.agentihooks.io/controller-owner", "operator": "Exists"}]}
MONITORING: Final = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
BASTION: Final = {"podSelector": {"matchLabels": {"role": "bastion"}}}


def policies(chart: Chart, values: dict[str, Any] | None = None) -> dict[tuple[str, str], Object]:
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in chart.render(values).of("NetworkPolicy")
    }


def component(name: str) -> Object:
    labels = {"app.kubernetes.io/name": "agentihooks-swarm", "app.kubernetes.io/instance": RELEASE}
    return {"podSelector": {"matchLabels": {**labels, "app.kubernetes.io/component": name}}}


def test_by_default_redis_metrics_and_workers_are_closed(chart: Chart) -> None:
    found = policies(chart)
    workers = f"{NAMESPACE}-workers"
    assert set(found) == {
        (NAMESPACE, f"{RELEASE}-redis"),
        (NAMESPACE, f"{RELEASE}-controller"),
        (workers, f"{RELEASE}-workers"),
    }
    [redis] = found[NAMESPACE, f"{RELEASE}-redis"]["spec"]["ingress"]
    assert redis["ports"] == [{"port": "redis", "protocol": "TCP"}]
    assert redis["from"] == [
        component("controller"),
        component("records"),
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": workers}},
            "podSelector": OWNED,
        },
    ]
    # Only the probes' port: nobody may scrape until metrics.from says who.
    controller = found[NAMESPACE, f"{RELEASE}-controller"]["spec"]
    assert controller["ingress"] == [{"ports": [{"port": "health", "protocol": "TCP"}]}]
    worker = found[workers, f"{RELEASE}-workers"]["spec"]
    assert (worker["podSelector"], worker["policyTypes"], worker["ingress"]) == (OWNED, ["Ingress"], [])


def test_the_peers_given_are_the_only_ones_let_in(chart: Chart) -> None:
    values = {
        "networkPolicy": {"metrics": {"from": [MONITORING]}, "workers": {"terminalFrom": [BASTION]}},
        "watch": {"namespaces": ["team-a", "team-b"]},
    }
    found = policies(chart, values)
    metrics = found[NAMESPACE, f"{RELEASE}-controller"]["spec"]["ingress"][1]
    assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [MONITORING]}
    for team in ("team-a", "team-b"):
        [terminal] = found[team, f"{RELEASE}-workers"]["spec"]["ingress"]
        assert terminal == {"ports": [{"port": "terminal", "protocol": "TCP"}], "from": [BASTION]}
    workers = [
        p["namespaceSelector"]["matchLabels"]
        for p in found[NAMESPACE, f"{RELEASE}-redis"]["spec"]["ingress"][0]["from"][2:]
    ]
    assert workers == [{"kubernetes.io/metadata.name": "team-a"}, {"kubernetes.io/metadata.name": "team-b"}]


def test_all_namespaces_and_external_redis_and_off(chart: Chart) -> None:
    found = policies(chart, {"watch": {"allNamespaces": True}})
    assert set(found) == {(NAMESPACE, f"{RELEASE}-redis"), (NAMESPACE, f"{RELEASE}-controller")}
    assert found[NAMESPACE, f"{RELEASE}-redis"]["spec"]["ingress"][0]["from"][2] == {
        "namespaceSelector": {},
        "podSelector": OWNED,
    }
    external = {"mode": "external", "external": {"url": "redis://r:6379/0"}}
    assert (NAMESPACE, f"{RELEASE}-redis") not in policies(chart, {"redis": external})
    assert policies(chart, {"networkPolicy": {"enabled": False}}) == {}


@pytest.mark.integration
def test_the_api_server_accepts_them(
    control_plane: ControlPlane, namespace: str, chart: Chart, tmp_path: Path
) -> None:
    """Rendered for the test's namespace (its own workers there too) with peers in both lists, and
    created for real: the API server's own validation of networking.k8s.io/v1."""
    values = {
        "networkPolicy": {
            "metrics": {"from": [MONITORING, BASTION]},
            "workers": {"terminalFrom": [BASTION, MONITORING]},
        },
        "watch": {"namespace": namespace},
    }
    rendered = [
        {**o, "metadata": {**o["metadata"], "namespace": namespace}}
        for o in chart.render(values).of("NetworkPolicy")
    ]
    assert len(rendered) == 3
    kubectl = str(control_plane.bin_dir / "kubectl")
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    manifest = yaml.safe_dump_all(rendered)
    for dry_run in (["--dry-run=server"], []):
        done = subprocess.run(
            [kubectl, "create", "--validate=strict", *dry_run, "-f", "-"],
            input=manifest, capture_output=True, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr
    listed = control_plane.request_json(
        "GET", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    )
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == sorted(
        o["metadata"]["name"] for o in rendered
    )
