"""The chart as users run it: ``helm install`` into a Pod Security ``restricted`` namespace on
the real node, the controller in-cluster (the operator's image, built offline here), records
read with ``kubectl exec deployment/RELEASE-controller -c controller -- python -c …``."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentihooks_swarm.kubernetes import owners
from tests.support import images, proof_script
from tests.support.busybox import pod as busybox_pod
from tests.support.chart_in_cluster import (
    IMAGE_VALUES,
    controller_python,
    install,
    lease_holder_pod,
    run,
)
from tests.support.cluster import ControlPlane, condition_true, host
from tests.support.redis_server import RedisServer

#: The spec's first read command, with this package's module path.
READ = """
import sys
from agentihooks_swarm.store import connect
store = connect()
print(store.redis.hget(store.key(sys.argv[1], sys.argv[2]), sys.argv[3]))
"""


@pytest.fixture
def node_redis() -> Iterator[RedisServer]:
    """A Redis outside the cluster that Pods can reach: on the node's address (a /32 on lo)."""
    with RedisServer(host=host.NODE_IP) as server:
        yield server


def redis_pods(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    """The bundled Redis's Pods (the chart's component label)."""
    selector = "app.kubernetes.io/component=redis"
    listed = run(plane, "kubectl", "get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def read_record(
    plane: ControlPlane, *, namespace: str, release: str, slug: str, name: str, execution: str
) -> Any:
    """The spec's read command, in the controller container."""
    target, args = f"deployment/{release}-controller", (slug, name, execution)
    out = controller_python(plane, namespace=namespace, target=target, script=READ, args=args)
    return None if out.strip() == "None" else json.loads(out)


@pytest.mark.pod_security("restricted")
@pytest.mark.parametrize("redis_mode", ["bundled", "external"])
def test_the_chart_runs_the_controller_in_cluster(
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    redis_mode: str,
    request: pytest.FixtureRequest,
) -> None:
    release = "ahs"
    values: tuple[str, ...] = ()
    if redis_mode == "external":
        server: RedisServer = request.getfixturevalue("node_redis")
        values = ("--set", "redis.mode=external", "--set", f"redis.external.url={server.url}")
    install(control_plane, namespace=namespace, release=release, values=values)

    deployment = json.loads(
        run(
            control_plane,
            "kubectl",
            "get",
            "deployment",
            f"{release}-controller",
            "-n",
            namespace,
            "-o",
            "json",
        )
    )
    assert deployment["status"].get("readyReplicas") == 1
    pod = lease_holder_pod(control_plane, namespace=namespace, release=release)
    assert pod.startswith(f"{release}-controller-")
    spec = json.loads(run(control_plane, "kubectl", "get", "pod", pod, "-n", namespace, "-o", "json"))
    assert not spec["spec"].get("hostNetwork")  # the Pod network, the `kubernetes` Service and DNS
    assert spec["status"]["podIP"].startswith("10.244.")
    [container] = [c for c in spec["spec"]["containers"] if c["name"] == "controller"]
    assert container["image"] == images.OPERATOR_REF

    metrics = run(
        control_plane,
        "kubectl",
        "get",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{pod}:9090/proxy/metrics",
    )
    assert "agentihooks_swarm_" in metrics

    # The spec's read command, verbatim, in the controller container: Redis reached from the Pod
    # (the bundled one by its Service's DNS name), nothing stored yet.
    assert (
        read_record(
            control_plane,
            namespace=namespace,
            release=release,
            slug="s",
            name="attempt-startup-diagnostics",
            execution="none",
        )
        is None
    )
    run(control_plane, "helm", "uninstall", release, "--namespace", namespace, "--wait")


@pytest.mark.pod_security("restricted")
@pytest.mark.parametrize("mode", ["logs", "no-logs"])
def test_startup_refusal_proof_in_cluster(
    control_plane: ControlPlane, swarm_crds: list[str], mode: str
) -> None:
    done, env = proof_script.run(
        control_plane,
        mode=mode,
        operator="in-cluster",
        timeout=600,
        WORKER_IMAGE=images.BUSYBOX_REF,
        HELM_ARGS=" ".join(IMAGE_VALUES),
        TIMEOUT="180",
    )
    output = done.stdout + done.stderr
    try:
        assert done.returncode == 0, output
        assert f"PROOF PASSED ({mode}, operator in-cluster)" in done.stdout, output
        # logs: the planted line is in the record; no-logs: exit reasons only, after three reads.
        assert ("planted kind refusal" in done.stdout) == (mode == "logs"), output
        assert ('"log_reads": 3' in done.stdout) == (mode == "no-logs"), output
    finally:
        run(control_plane, "kubectl", "delete", "namespace", env["NAMESPACE"], "--wait=false", check=False)


#: Evidence for several executions in one exec: the launch-removal record and the retained one.
READ_EVIDENCE = """
import json, sys
from agentihooks_swarm.store import connect
store = connect()
slug = sys.argv[1]
found = {}
for execution in sys.argv[2:]:
    startup = store.redis.hget(store.key(slug, "attempt-startup-diagnostics"), execution)
    retained = store.redis.hget(store.key(slug, "attempt-retained"), execution)
    found[execution] = {"startup": json.loads(startup) if startup else None,
                        "retained": json.loads(retained) if retained else None}
found["_count"] = store.redis.hlen(store.key(slug, "attempt-startup-diagnostics"))
print(json.dumps(found))
"""


def manifest(plane: ControlPlane, namespace: str, document: dict[str, Any]) -> None:
    path = plane.workdir / f"manifest-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(document))
    run(plane, "kubectl", "apply", "-n", namespace, "-f", str(path))


def refuse_planted_workers(
    plane: ControlPlane, *, namespace: str, slug: str, executions: list[str]
) -> dict[str, str]:
    """Executions whose hand is refused, each with a failed worker (a real container that prints
    its refusal and exits 78) planted under its Pod name and labels and owned by it, then their
    Swarm; return each planted Pod's UID. The Executions come first, their Swarm last: the operator
    adopts only a Pod its Execution owns, and launches nothing before the Swarm exists."""
    uids: dict[str, str] = {}
    for execution in executions:
        manifest(plane, namespace, {
            "apiVersion": "swarm.agentihooks.io/v1alpha1", "kind": "Execution",
            "metadata": {"name": execution},
            "spec": {"swarm": slug, "project": "outside", "task": {"n": execution}},
        })  # fmt: skip
        owner = run(
            plane, "kubectl", "get", "execution", execution, "-n", namespace, "-o", "jsonpath={.metadata.uid}"
        )
        worker = busybox_pod("w", f"echo 'worker startup refused: {execution}'; exit 78")
        worker["metadata"] = {
            "name": f"swarm-worker-{execution}-1",
            "labels": {
                "swarm.agentihooks.io/controller-owner": f"agentihooks-swarm-{slug}",
                "swarm.agentihooks.io/execution-id": execution,
                "swarm.agentihooks.io/generation": "1",
            },
            "ownerReferences": [owners.execution_reference(name=execution, uid=owner)],
            "finalizers": [owners.EVIDENCE_FINALIZER],
        }
        manifest(plane, namespace, worker)
    for execution in executions:
        run(plane, "kubectl", "wait", "-n", namespace, "--for=jsonpath={.status.phase}=Failed",
            f"pod/swarm-worker-{execution}-1", "--timeout=90s")  # fmt: skip
        uids[execution] = run(
            plane, "kubectl", "get", "pod", f"swarm-worker-{execution}-1", "-n", namespace,
            "-o", "jsonpath={.metadata.uid}",
        )  # fmt: skip
    manifest(plane, namespace, {
        "apiVersion": "swarm.agentihooks.io/v1alpha1", "kind": "Swarm", "metadata": {"name": slug},
        "spec": {"registration": {"projects": ["registered"]}, "worker": {"image": images.BUSYBOX_REF}},
    })  # fmt: skip
    return uids


@pytest.mark.pod_security("restricted")
def test_two_replicas_in_cluster_survive_the_leader_pod_being_killed(
    control_plane: ControlPlane, namespace: str, swarm_crds: list[str]
) -> None:
    release, slug, count = "ha", "ha", 6
    install(
        control_plane, namespace=namespace, release=release,
        # Workers in the release namespace (the chart's earlier layout): this test is about the
        # leader, not where workers run.
        values=("--set", "replicas=2", "--set", "operator.leaseDurationSeconds=6",
                "--set", f"watch.namespace={namespace}"),
    )  # fmt: skip
    leader = lease_holder_pod(control_plane, namespace=namespace, release=release)
    executions = [f"ha-{i}" for i in range(count)]
    uids = refuse_planted_workers(control_plane, namespace=namespace, slug=slug, executions=executions)
    # Refusals are in flight: kill the leader's Pod outright; the standby takes over.
    run(control_plane, "kubectl", "delete", "pod", leader, "-n", namespace, "--grace-period=0", "--force")
    for execution in executions:
        run(control_plane, "kubectl", "wait", "-n", namespace, "--for=delete",
            f"pod/swarm-worker-{execution}-1", "--timeout=150s")  # fmt: skip
    # The killed Pod's process may still finish the refusals in flight (the kubelet stops its
    # container a moment after the forced delete); its Lease then runs out and the standby takes it.
    new_leader = lease_holder_pod(control_plane, namespace=namespace, release=release, other_than=leader)
    assert new_leader != leader

    out = controller_python(
        control_plane, namespace=namespace, target=new_leader, script=READ_EVIDENCE, args=(slug, *executions)
    )
    evidence = json.loads(out)
    for execution in executions:
        startup = evidence[execution]["startup"]
        retained = evidence[execution]["retained"]
        # Stored exactly once: by launch removal (first capture wins), or, if that was cut off
        # with the leader, by final cleanup; either way for the Pod's own UID, with its log.
        if startup is not None:
            capture, uid = startup["startup"], startup["uid"]
        else:
            assert retained is not None, f"no evidence for {execution}: {evidence}"
            [entry] = retained["removed"]["pods"]
            capture, uid = entry["startup"], entry["uid"]
        assert uid == uids[execution]
        [container] = capture["containers"]
        assert container["terminated"]["exitCode"] == 78
        assert container["log"].rstrip().endswith(f"worker startup refused: {execution}")
    assert evidence["_count"] <= count


@pytest.mark.pod_security("restricted")
def test_records_survive_the_bundled_redis_pod_being_deleted(
    control_plane: ControlPlane, namespace: str, swarm_crds: list[str]
) -> None:
    """Issue 10: the bundled Redis keeps its data on a PersistentVolumeClaim (AOF, fsync always),
    so deleting its Pod loses no record; read with the spec's commands before and after."""
    release, slug = "keep", "keep"
    # Workers in the release namespace (the chart's earlier layout): this test is about Redis.
    install(
        control_plane, namespace=namespace, release=release, values=("--set", f"watch.namespace={namespace}")
    )
    executions = [f"keep-{i}" for i in range(3)]
    refuse_planted_workers(control_plane, namespace=namespace, slug=slug, executions=executions)
    for execution in executions:
        run(control_plane, "kubectl", "wait", "-n", namespace, "--for=jsonpath={.status.phase}=Done",
            f"execution/{execution}", "--timeout=120s")  # fmt: skip

    def records() -> dict[tuple[str, str], Any]:
        return {
            (execution, name): read_record(
                control_plane, namespace=namespace, release=release, slug=slug, name=name, execution=execution
            )
            for execution in executions
            for name in ("attempt-startup-diagnostics", "attempt-retained")
        }

    before = records()
    assert all(value is not None for value in before.values()), before
    [old] = [p["metadata"] for p in redis_pods(control_plane, namespace)]
    run(control_plane, "kubectl", "delete", "pod", old["name"], "-n", namespace, "--wait=true")
    deadline = time.monotonic() + 120
    while not [
        p
        for p in redis_pods(control_plane, namespace)
        if p["metadata"]["uid"] != old["uid"] and condition_true(p, "Ready")
    ]:
        assert time.monotonic() < deadline, "the bundled Redis did not come back Ready in 120s"
        time.sleep(1)
    assert records() == before
