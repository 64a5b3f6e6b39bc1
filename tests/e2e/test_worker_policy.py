"""Issue 28, item 2: what a Swarm author may put in a worker is the cluster admin's choice, and the
operator holds to it at launch, where no admission policy refused the Swarm first.

With the chart's ValidatingAdmissionPolicy off (this cluster has none), a Swarm that asks for a
ServiceAccount, a Secret and a pod security setting the worker policy does not allow is admitted;
its Execution ends ``Invalid`` (``WorkerNotAllowed``) with a condition and a Warning Event naming
each field and value, and no Pod is created. Fixing the Swarm launches it, as the worker
ServiceAccount the operator is configured with.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.operator_process import OperatorProcess

WORKER_ACCOUNT = "swarm-worker"


async def _condition(api: client.ApiClient, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
    status = (await watching.execution(api, namespace=namespace, name=name)).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _wide_swarm(namespace: str) -> dict[str, Any]:
    """A Swarm that asks for a ServiceAccount, a Secret and a pod security setting the worker
    policy does not allow."""
    swarm = builders.swarm(
        name="wide",
        namespace=namespace,
        env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "token"}}}],
    )
    swarm["spec"]["worker"]["serviceAccountName"] = "default"
    swarm["spec"]["worker"]["securityContext"] = {
        "runAsUser": 1000,
        "appArmorProfile": {"type": "Unconfined"},
    }
    return swarm


async def _check_invalid_with_no_pod(
    api: client.ApiClient, process: OperatorProcess, *, namespace: str, pod: str
) -> None:
    """e1 is Invalid (WorkerNotAllowed), its condition and Warning Event name each field and
    value, and it has no hand and no Pod."""
    invalid = await watching.eventually(
        lambda: _condition(api, namespace, "e1", "Invalid"),
        what="the Invalid condition",
        operator=process,
    )
    assert (invalid["status"], invalid["reason"]) == ("True", "WorkerNotAllowed")
    message = invalid["message"]
    assert 'spec.worker.serviceAccountName: "default" is not allowed (allowed: swarm-worker)' in message
    assert 'spec.worker.env[0].valueFrom.secretKeyRef.name: "db-password" is not allowed' in message
    assert 'spec.worker.securityContext.appArmorProfile.type: "Unconfined" is not allowed' in message
    status = (await watching.execution(api, namespace=namespace, name="e1"))["status"]
    assert status["phase"] == "Invalid" and "hand" not in status
    found = await watching.events_once(
        api, namespace=namespace, name="e1", reasons={"WorkerNotAllowed"}, operator=process
    )
    [event] = [(t, m) for t, r, m in found if r == "WorkerNotAllowed"]
    assert event[0] == "Warning" and 'serviceAccountName: "default"' in event[1]
    assert not await watching.pod_exists(api, namespace=namespace, name=pod)


async def _fix_the_swarm(api: client.ApiClient, *, namespace: str) -> None:
    """No ServiceAccount, a Secret under the prefix, a restricted AppArmor profile."""
    await watching.merge_patch(
        api,
        namespace=namespace,
        plural="swarms",
        name="wide",
        body={
            "spec": {
                "worker": {
                    "serviceAccountName": None,
                    "env": [
                        {
                            "name": "TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "swarm-worker-db", "key": "t"}},
                        }
                    ],
                    "securityContext": {"runAsUser": 1000, "appArmorProfile": {"type": "RuntimeDefault"}},
                }
            }
        },
    )


async def test_a_worker_the_policy_does_not_allow_is_invalid_with_no_pod_until_the_swarm_is_fixed(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    control_plane.request_json(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"metadata": {"name": WORKER_ACCOUNT}, "automountServiceAccountToken": False},
    )
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT": WORKER_ACCOUNT},
    )
    # No admission policy here: the operator must say no.
    await watching.create(admin_api, _wide_swarm(namespace))
    await watching.create(admin_api, builders.execution(name="e1", namespace=namespace, swarm="wide"))
    pod = labels.worker_pod_name(execution="e1", generation=1)
    await _check_invalid_with_no_pod(admin_api, process, namespace=namespace, pod=pod)

    # The Swarm fixed: the change launches it again, and the worker runs as the operator's worker
    # ServiceAccount.
    await _fix_the_swarm(admin_api, namespace=namespace)

    async def launched() -> dict[str, Any] | None:
        listed = await client.CoreV1Api(admin_api).list_namespaced_pod(namespace)
        return next((p.to_dict() for p in listed.items if p.metadata.name == pod), None)

    created = await watching.eventually(launched, what="the worker Pod after the fix", operator=process)
    assert created["spec"]["service_account_name"] == WORKER_ACCOUNT
    assert created["spec"]["automount_service_account_token"] is False
    handed = await watching.eventually(
        lambda: _condition(admin_api, namespace, "e1", "Handed"), what="the hand", operator=process
    )
    assert handed["status"] == "True", handed
