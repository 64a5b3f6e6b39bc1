"""Refused worker Pods planted through kwok: for the tests that run the operator's code
in-process, an attempt of the ``proof`` Swarm, its worker Pod driven to a phase with a planted log,
and launch removal over it; for the tests that run the operator as a process, the refused worker of
an Execution's first attempt (:func:`plant_refused_worker`)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.lifecycle import events, launch, model
from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane

#: The log line every planted refused worker wrote.
PLANTED = b"worker startup refused: planted kind refusal\n"
SLUG = "proof"


def attempt_for(
    namespace: str, execution: str = "e1", generation: int = 1, *, owner_uid: str = ""
) -> model.Attempt:
    """An attempt of the ``proof`` Swarm; its Pods are owned by Execution ``owner_uid`` when given."""
    return model.Attempt(
        namespace=namespace, slug=SLUG, execution=execution, generation=generation, owner_uid=owner_uid
    )


async def owner(api: client.ApiClient, *, namespace: str, execution: str, swarm: str = SLUG) -> str:
    """The UID of Execution ``execution`` (made now when there is none): the owner of the worker
    Pods a test plants as the operator would make them. With no operator running, nothing steps it."""
    try:
        await watching.create(api, builders.execution(name=execution, namespace=namespace, swarm=swarm))
    except client.ApiException as e:
        if e.status != 409:
            raise
    found = await watching.execution(api, namespace=namespace, name=execution)
    return str(found["metadata"]["uid"])


def as_the_operator_makes_it(attempt: model.Attempt) -> dict[str, Any]:
    """The metadata that makes a planted Pod the attempt's own, as the operator's create body does:
    the controller reference to its Execution and the evidence finalizer (none without an owner)."""
    if not attempt.owner_uid:
        return {}
    return {
        "owner_references": [owners.execution_reference(name=attempt.execution, uid=attempt.owner_uid)],
        "finalizers": [owners.EVIDENCE_FINALIZER],
    }


async def plant_pod(
    api: client.ApiClient,
    cluster: ControlPlane,
    *,
    attempt: model.Attempt,
    phase: Any = "Failed",
    log: bytes | None = PLANTED,
    wait_for: str | None = None,
    **behaviour: Any,
) -> dict[str, Any]:
    """A worker Pod of ``attempt`` that kwok drives to ``phase``, with a planted log; returns it raw."""
    if log is not None:
        await pods.plant_log(
            cluster=cluster,
            namespace=attempt.namespace,
            pod=attempt.pod_name,
            container="worker",
            content=log,
        )
    body: Any = pods.worker_pod(
        name=attempt.pod_name,
        namespace=attempt.namespace,
        labels=attempt.labels,
        phase=phase,
        **as_the_operator_makes_it(attempt),
        **behaviour,
    )
    await client.CoreV1Api(api).create_namespaced_pod(attempt.namespace, body)
    target: Any = wait_for or (
        "Failed" if behaviour.get("init_exit_code") is not None else phase or "Running"
    )
    await pods.wait_for_phase(api, namespace=attempt.namespace, name=attempt.pod_name, phase=target)
    raw: Any = await client.CoreV1Api(api).read_namespaced_pod(
        attempt.pod_name, attempt.namespace, _preload_content=False
    )
    found: dict[str, Any] = json.loads(await raw.read())
    return found


async def remove(runtime: model.Runtime, attempt: model.Attempt, uid: str) -> launch.Removal:
    return await launch.remove_at_launch(runtime=runtime, attempt=attempt, uid=uid, notify=events.Collected())


async def plant_refused_worker(
    api: client.ApiClient, cluster: ControlPlane, *, namespace: str, slug: str, execution: str
) -> str:
    """The worker Pod of ``execution``'s first attempt, already Failed (exit 78) with the PLANTED
    log, as a refused worker leaves it; returns its name once kwok reports it Failed.

    Execution ``execution`` must exist (its UID owns the Pod, as the operator's own create would),
    and no operator may run yet: one would make the Pod itself first."""
    pod_name = labels.worker_pod_name(execution=execution, generation=1)
    found = await watching.execution(api, namespace=namespace, name=execution)
    made = attempt_for(namespace, execution, owner_uid=str(found["metadata"]["uid"]))
    await pods.plant_log(
        cluster=cluster, namespace=namespace, pod=pod_name, container="worker", content=PLANTED
    )
    planted: Any = pods.worker_pod(
        name=pod_name,
        namespace=namespace,
        phase="Failed",
        exit_code=78,
        reason="Error",
        labels=labels.attempt(slug=slug, execution=execution, generation=1),
        **as_the_operator_makes_it(made),
    )
    await client.CoreV1Api(api).create_namespaced_pod(namespace, planted)
    await pods.wait_for_phase(api, namespace=namespace, name=pod_name, phase="Failed")
    return pod_name


def assert_removed_unpermitted(hand: dict[str, Any]) -> None:
    """``status.hand`` of an Execution whose project its Swarm does not permit, after launch
    removal took its planted refused worker (:func:`plant_refused_worker`): not handed, the Pod
    removed (under whatever UID it had), the attempt not ended by a worker's exit."""
    assert hand == {
        "handed": False,
        "reason": "project_unpermitted",
        "removed": True,
        "podUid": hand["podUid"],
        "terminal": False,
    }
