"""`helm install` of the chart into a namespace that enforces Pod Security `restricted`, on the
local control plane (tests/support/cluster.py): server-side apply, strict server-side field
validation of every rendered object, and the controller's Pods admitted.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import CHART_DIR
from tests.support.cluster import ControlPlane

pytestmark = pytest.mark.integration

RELEASE = "swarm"


def _run(
    argv: list[str], *, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, env=env, check=False, timeout=180
    )
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def _get(plane: ControlPlane, path: str) -> dict[str, Any]:
    return plane.request_json("GET", path)


@pytest.mark.compat  # also on the oldest Kubernetes the chart allows (make test-compat)
@pytest.mark.pod_security("restricted")
def test_helm_install_into_a_restricted_namespace(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    helm, kubectl = str(control_plane.bin_dir / "helm"), str(control_plane.bin_dir / "kubectl")
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig),
        **{f"HELM_{part}_HOME": str(tmp_path / part.lower()) for part in ("CACHE", "CONFIG", "DATA")},
    }
    installed = _run(
        [helm, "install", RELEASE, str(CHART_DIR), "--namespace", namespace, "--server-side=true"],
        env=env,
    )
    try:
        assert "PodSecurity" not in installed.stderr, installed.stderr

        _strictly_valid(helm, kubectl, namespace=namespace, env=env)

        crds = {
            item["metadata"]["name"]
            for item in _get(control_plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")[
                "items"
            ]
        }
        assert {"executions.swarm.agentihooks.io", "swarms.swarm.agentihooks.io"} <= crds
        assert not {name for name in crds if name.endswith(".kopf.dev")}

        deployment = _get(
            control_plane, f"/apis/apps/v1/namespaces/{namespace}/deployments/{RELEASE}-controller"
        )
        containers = deployment["spec"]["template"]["spec"]["containers"]
        assert [c["name"] for c in containers] == ["controller"]

        _workers_namespace(control_plane, f"{namespace}-workers")
        _redis_pod_admitted(control_plane, namespace)
        _controller_pods_admitted(control_plane, namespace)
    finally:
        _run([helm, "uninstall", RELEASE, "--namespace", namespace, "--wait=hookOnly"], env=env)
        control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}-workers")  # kept by Helm


def _strictly_valid(helm: str, kubectl: str, *, namespace: str, env: dict[str, str]) -> None:
    """Every rendered object passes the API server's strict field validation."""
    rendered = _run([helm, "template", RELEASE, str(CHART_DIR), "--namespace", namespace], env=env)
    validated = _run(
        [
            kubectl,
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "--validate=strict",
            "--field-manager=chart-test",
            "-f",
            "-",
        ],
        env=env,
        stdin=rendered.stdout,
    )
    assert "Warning" not in validated.stderr, validated.stderr


def _workers_namespace(control_plane: ControlPlane, workers: str) -> None:
    """The workers' own namespace (Pod Security restricted), with the Role and the worker
    ServiceAccount, and the policy that refuses a Swarm asking for what workers may not use."""
    labels = _get(control_plane, f"/api/v1/namespaces/{workers}")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    role = _get(
        control_plane,
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{workers}/roles/{RELEASE}-controller",
    )
    assert {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]} in role["rules"]
    account = _get(control_plane, f"/api/v1/namespaces/{workers}/serviceaccounts/{RELEASE}-worker")
    assert account["automountServiceAccountToken"] is False
    _refused_at_admission(control_plane, workers)


def _redis_pod_admitted(control_plane: ControlPlane, namespace: str) -> None:
    """Pod Security `restricted` admits the bundled Redis's Pod: the test control plane runs no
    StatefulSet controller, so the Pod its template makes is created with a server dry run."""
    statefulset = _get(control_plane, f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{RELEASE}-redis")
    template = statefulset["spec"]["template"]
    [claim] = statefulset["spec"]["volumeClaimTemplates"]
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{RELEASE}-redis-0"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{RELEASE}-redis-0", "labels": template["metadata"]["labels"]},
        "spec": {**template["spec"], "volumes": [*template["spec"].get("volumes", []), volume]},
    }
    assert claim["metadata"]["name"] == "data"
    control_plane.request_json("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)


def _controller_pods_admitted(control_plane: ControlPlane, namespace: str) -> None:
    """Pod Security `restricted` admits the controller's Pods (within 60 s; a ReplicaSet's
    ReplicaFailure says at once why not)."""
    for component in ("controller",):
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
        deadline = time.monotonic() + 60
        while not _get(control_plane, f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")[
            "items"
        ]:
            sets = _get(
                control_plane,
                f"/apis/apps/v1/namespaces/{namespace}/replicasets?labelSelector={selector}",
            )["items"]
            failures = [
                c["message"]
                for rs in sets
                for c in (rs.get("status") or {}).get("conditions") or []
                if c["type"] == "ReplicaFailure"
            ]
            assert not failures, failures
            assert time.monotonic() < deadline, f"no {component} Pod after 60s"
            time.sleep(0.5)


def _refused_at_admission(control_plane: ControlPlane, workers: str) -> None:
    """A Swarm asking for the namespace's default ServiceAccount is refused, once the API server
    has the policy in force (it compiles it and sees its binding within a moment)."""
    swarm = {
        "apiVersion": "swarm.agentihooks.io/v1alpha1",
        "kind": "Swarm",
        "metadata": {"name": "wide"},
        "spec": {"worker": {"image": "busybox", "serviceAccountName": "default"}},
    }
    path = f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{workers}/swarms?dryRun=All"
    deadline = time.monotonic() + 30
    while (answer := control_plane.request("POST", path, swarm))[0] != 403:
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    assert b'spec.worker.serviceAccountName: \\"default\\" is not allowed' in answer[1], answer
