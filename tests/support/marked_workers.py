"""The ``life`` Swarm of the lifecycle tests that run the operator as a process: each worker's log
carries its own Execution's marker, so a capture can be told as its own; a worker failed as its
kubelet would report it; and what is left (Executions, worker Pods, journal entries)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import labels
from tests.support import pods
from tests.support.cluster import ControlPlane
from tests.support.fixtures_scene import Scene
from tests.support.operator_process import OperatorProcess

SLUG = "life"
PREFIX = "agentihooks-swarm"


def marker(execution: str) -> bytes:
    return f"worker {execution} refused: its own words\n".encode()


async def plant_marker(cluster: ControlPlane, *, namespace: str, execution: str) -> str:
    """Plant the worker log carrying ``execution``'s marker for its first worker Pod; its name."""
    pod = labels.worker_pod_name(execution=execution, generation=1)
    await pods.plant_log(
        cluster=cluster, namespace=namespace, pod=pod, container="worker", content=marker(execution)
    )
    return pod


async def launch_marked(
    scene: Scene,
    *,
    execution: str,
    kubeconfig: Path | None = None,
    env: dict[str, str] | None = None,
    via_kopf: bool = False,
    project: str = "allowed",
    behaviour: Mapping[str, str],
) -> OperatorProcess:
    """``execution``'s marker planted, the operator started (on ``kubeconfig``, with ``env``), the
    ``life`` Swarm whose workers do what ``behaviour`` says (:func:`pods.protocol_annotations`),
    and ``execution`` of it for ``project``."""
    await plant_marker(scene.cluster, namespace=scene.namespace, execution=execution)
    process = scene.start(kubeconfig=kubeconfig, env=env, via_kopf=via_kopf)
    await scene.swarm(name=SLUG, annotations=behaviour)
    await scene.execution(name=execution, swarm=SLUG, project=project)
    return process


async def executions_left(api: client.ApiClient, namespace: str) -> list[str]:
    listed = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions"
    )
    return [item["metadata"]["name"] for item in listed["items"]]


async def worker_pods(api: client.ApiClient, namespace: str) -> list[Any]:
    listed = await client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{labels.OWNER}={labels.owner(SLUG)}"
    )
    return list(listed.items)


async def delete_execution(api: client.ApiClient, namespace: str, name: str) -> None:
    await client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions", name
    )


async def journal_entries(redis_url: str) -> dict[str, Any]:
    import redis.asyncio

    connection = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        found = await connection.hgetall(store_.key(PREFIX, SLUG, store_.JOURNAL))
    finally:
        await connection.aclose()
    return {str(k): v for k, v in found.items()}


async def fail_worker(
    api: client.ApiClient, *, namespace: str, pod: str, exit_code: int, reason: str
) -> None:
    """The worker fails now, as its kubelet would report it (the Pod's status written directly)."""
    container = {
        "name": "worker",
        "image": pods.WORKER_IMAGE,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": exit_code, "reason": reason}},
    }
    body = {"status": {"phase": "Failed", "containerStatuses": [container]}}
    await client.CoreV1Api(api).patch_namespaced_pod_status(pod, namespace, body)


def assert_one_capture_of_its_own(retained: Any, *, execution: str, exit_code: int) -> None:
    """The retained record holds exactly one removed Pod, captured, with this execution's own log."""
    assert retained is not None, f"{execution}: no attempt-retained record"
    [entry] = retained["removed"]["pods"]
    assert entry["name"] == labels.worker_pod_name(execution=execution, generation=1)
    # absent: deleted by someone else (the garbage collector, once its Execution went first), held
    # by its evidence finalizer for this capture, then released.
    assert entry["outcome"] in ("deleted", "absent_after_send", "absent"), entry
    [container] = entry["startup"]["containers"]
    assert container["terminated"]["exitCode"] == exit_code
    assert container["log"].endswith(marker(execution).decode()), container["log"]
