"""Worker Pods are owned: on the real API server, with its garbage collector, and the operator as a
process.

A Pod with a worker's name and labels that its Execution does not own (a look-alike anyone who may
create Pods can make) is neither adopted, nor captured, nor deleted: the Execution says why it did
not launch, a Warning Event and a metric tell it. The worker Pods the operator makes are owned by
their Execution (a controller reference by UID) and hold the evidence finalizer, so the garbage
collector, which now deletes them on its own whenever their Execution goes first, never takes a
refused worker's evidence with it:

* a foreground delete of the Execution (the collector deletes the Pod, or leaves it to the operator
  when it is done with the Execution first: the Pod's owner reference does not block);
* an Execution gone without its cleanup (its finalizer removed by hand): the orphan pass;
* an orphaning delete (the collector strips the Pod's owner reference): the recorded Pod UID;
* the name's claim in Redis lost (as a failover drops writes), for a deleted Execution whose status
  never got its hand and for one gone without its cleanup: the Pod it owns is still its own.

In each, the operator is stopped while the worker fails and the Execution is deleted, so what the
collector does happens with no operator there to race it.
"""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import pytest
import redis.asyncio
from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.storage import keys
from tests.support import pods
from tests.support.fixtures_scene import GROUP, VERSION, Scene
from tests.support.operator_process import OperatorProcess
from tests.support.planting import PLANTED
from tests.support.redis_server import free_port

SLUG = "owned"


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


async def _pod(scene: Scene, name: str) -> Any:
    try:
        return await client.CoreV1Api(scene.api).read_namespaced_pod(name, scene.namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


async def test_a_look_alike_pod_is_neither_adopted_captured_nor_deleted(scene: Scene) -> None:
    execution = "wanted"
    pod_name = labels.worker_pod_name(execution=execution, generation=1)
    await pods.plant_log(
        cluster=scene.cluster, namespace=scene.namespace, pod=pod_name, container="worker", content=PLANTED
    )
    # Made before the Execution, by someone who may create Pods: the right name and labels, refused
    # at startup (its log is what a capture would take), and no owner.
    look_alike: Any = pods.worker_pod(
        name=pod_name,
        namespace=scene.namespace,
        labels=labels.attempt(slug=SLUG, execution=execution, generation=1),
        phase="Failed",
        exit_code=78,
        reason="Error",
    )
    await client.CoreV1Api(scene.api).create_namespaced_pod(scene.namespace, look_alike)
    await pods.wait_for_phase(scene.api, namespace=scene.namespace, name=pod_name, phase="Failed")
    planted = await _pod(scene, pod_name)
    assert planted is not None
    planted_uid = planted.metadata.uid

    port = free_port()
    process = scene.start(env={"AGENTIHOOKS_SWARM_METRICS_PORT": str(port)})
    await scene.swarm(name=SLUG, annotations=pods.protocol_annotations(phase="Running"))
    await scene.execution(name=execution, swarm=SLUG)

    status = await scene.until_phase(execution, "Blocked", process=process)
    [launched] = [c for c in status["conditions"] if c["type"] == "Launched"]
    assert launched["reason"] == "PodNameTaken", status
    assert "not owned by Execution wanted" in launched["message"], launched
    found = await scene.events_once(execution, reasons={"LookAlikePod"}, process=process)
    assert next(e for e in found if e[1] == "LookAlikePod")[0] == "Warning"
    assert _metric(port, 'agentihooks_swarm_look_alike_pods_total{path="launch"}') >= 1

    # Left as it was: not adopted (no grant), not captured, not deleted.
    await asyncio.sleep(2)
    still = await _pod(scene, pod_name)
    assert still is not None and still.metadata.uid == planted_uid and not still.metadata.deletion_timestamp
    assert not still.metadata.finalizers
    grants = await client.CoreV1Api(scene.api).list_namespaced_config_map(scene.namespace)
    assert [g.metadata.name for g in grants.items if g.metadata.name.startswith("swarm-grant-")] == []
    assert await scene.stored(slug=SLUG, name=store_.STARTUP_DIAGNOSTICS, execution=execution) is None
    assert await scene.stored(slug=SLUG, name=store_.HANDS, execution=execution) is None

    # Its maker removes it: the Execution launches its own worker, owned by it.
    await pods.force_delete(scene.api, namespace=scene.namespace, name=pod_name)
    status = await scene.until_phase(execution, "Running", process=process, timeout=90)
    own = await _pod(scene, pod_name)
    assert own is not None and own.metadata.uid != planted_uid
    [owner] = own.metadata.owner_references
    uid = (await scene.get(execution))["metadata"]["uid"]
    assert (owner.kind, owner.uid, owner.controller) == ("Execution", uid, True)
    assert status["hand"]["podUid"] == own.metadata.uid


async def _running_worker(scene: Scene, *, execution: str) -> tuple[OperatorProcess, str, str]:
    """Execution ``execution`` handed, its worker Running; then the operator stopped and the worker
    refused (Failed 78, its log planted). The stopped process, the Pod's name and UID."""
    pod_name = labels.worker_pod_name(execution=execution, generation=1)
    await pods.plant_log(
        cluster=scene.cluster, namespace=scene.namespace, pod=pod_name, container="worker", content=PLANTED
    )
    process = scene.start()
    await scene.swarm(name=SLUG, annotations=pods.protocol_annotations(phase="Running"))
    await scene.execution(name=execution, swarm=SLUG)
    await scene.until_phase(execution, "Running", process=process)
    process.stop()
    found = await _pod(scene, pod_name)
    assert found is not None and found.metadata.finalizers == [owners.EVIDENCE_FINALIZER]
    # The worker ends refused, with no operator running: the kubelet (kwok) fails it.
    failing = pods.protocol_annotations(phase="Failed", exit_code=78, reason="Error")
    await client.CoreV1Api(scene.api).patch_namespaced_pod(
        pod_name, scene.namespace, {"metadata": {"annotations": failing}}
    )
    await pods.wait_for_phase(scene.api, namespace=scene.namespace, name=pod_name, phase="Failed")
    return process, pod_name, found.metadata.uid


async def _delete(scene: Scene, name: str, *, propagation: str) -> None:
    await client.CustomObjectsApi(scene.api).delete_namespaced_custom_object(
        GROUP,
        VERSION,
        scene.namespace,
        "executions",
        name,
        body=client.V1DeleteOptions(propagation_policy=propagation),
    )


async def _held(scene: Scene, pod_name: str, uid: str) -> None:
    """The collector deletes the worker; its evidence finalizer holds it, readable: the Pod is still
    there, its UID the worker's, for a few seconds of the collector's work."""

    async def deleting() -> bool:
        found = await _pod(scene, pod_name)
        return found is not None and found.metadata.deletion_timestamp is not None

    # The collector acts on Executions only once its discovery (every 30 s) has found their
    # kind, which a test that runs first in a new cluster may wait for.
    await scene.until(deleting, what=f"the collector to delete {pod_name}", timeout=120)
    await _readable(scene, pod_name, uid)


async def _readable(scene: Scene, pod_name: str, uid: str) -> None:
    """The worker is there, its UID the worker's, for the next few seconds."""
    for _ in range(6):
        found = await _pod(scene, pod_name)
        assert found is not None and found.metadata.uid == uid
        await asyncio.sleep(0.5)


async def _captured_in_retained(
    scene: Scene, *, execution: str, pod_name: str, uid: str, process: OperatorProcess
) -> None:
    retained = await scene.until_cleaned_up(execution, slug=SLUG, process=process, timeout=120)
    [entry] = [p for p in retained["removed"]["pods"] if p["uid"] == uid]
    [container] = entry["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 78
    assert container["log"].endswith(PLANTED.decode())
    assert await _pod(scene, pod_name) is None


async def test_a_foreground_delete_leaves_the_refused_worker_readable_until_its_capture(scene: Scene) -> None:
    execution = "foreground"
    _, pod_name, uid = await _running_worker(scene, execution=execution)
    # The worker's owner reference does not block its owner's deletion and the operator puts no
    # finalizer on the Execution, so the collector lets the Execution go, then deletes its worker:
    # the evidence finalizer holds it, readable, until the operator (started after) captures it.
    await _delete(scene, execution, propagation="Foreground")
    await _held(scene, pod_name, uid)

    process = scene.start()
    await _captured_in_retained(scene, execution=execution, pod_name=pod_name, uid=uid, process=process)


async def _lose_the_claim(scene: Scene, execution: str) -> None:
    """The name's claim gone from Redis, as a failover that promotes a replica without it leaves it."""
    connection = redis.asyncio.Redis.from_url(scene.redis_url)
    try:
        assert await connection.hdel(store_.key("agentihooks-swarm", SLUG, keys.OWNERS), execution) == 1
    finally:
        await connection.aclose()


@pytest.mark.parametrize("claim", ["kept", "lost"])
async def test_an_execution_gone_without_its_cleanup_leaves_its_worker_to_the_orphan_pass(
    scene: Scene, claim: str
) -> None:
    execution = "vanished"
    _, pod_name, uid = await _running_worker(scene, execution=execution)
    if claim == "lost":
        await _lose_the_claim(scene, execution)
    # Deleted while no operator runs: gone at once, and the collector deletes its worker.
    await _delete(scene, execution, propagation="Background")
    await _held(scene, pod_name, uid)

    process = scene.start(env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "1"})
    # The orphan pass cleans the attempt up.
    await _captured_in_retained(scene, execution=execution, pod_name=pod_name, uid=uid, process=process)


async def test_an_orphaning_delete_still_cleans_up_the_worker_it_unowned(scene: Scene) -> None:
    execution = "orphaning"
    _, pod_name, uid = await _running_worker(scene, execution=execution)
    await _delete(scene, execution, propagation="Orphan")

    async def unowned() -> bool:
        found = await _pod(scene, pod_name)
        return found is not None and not found.metadata.owner_references

    await scene.until(unowned, what="the collector to strip the worker's owner reference")
    process = scene.start()
    await _captured_in_retained(scene, execution=execution, pod_name=pod_name, uid=uid, process=process)


async def test_a_deleted_execution_without_its_hand_or_claim_still_cleans_up_the_pod_it_owns(
    scene: Scene,
) -> None:
    execution = "unrecorded"
    _, pod_name, uid = await _running_worker(scene, execution=execution)
    # The launch's status write and its claim both lost: the step knows of no launch but the Pod.
    await client.CustomObjectsApi(scene.api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        scene.namespace,
        "executions",
        execution,
        [{"op": "remove", "path": "/status"}],
    )
    await _lose_the_claim(scene, execution)
    await _delete(scene, execution, propagation="Background")
    process = scene.start()
    await _captured_in_retained(scene, execution=execution, pod_name=pod_name, uid=uid, process=process)


async def test_deleting_an_execution_that_never_launched_claims_nothing(scene: Scene) -> None:
    # Its Swarm does not exist: Pending, SwarmNotFound, no Pod, no claim. Deleting it looks for a
    # Pod it owns (none) and must not take the swarm's name for this namespace on the way out.
    process = scene.start()
    await scene.execution(name="never", swarm="nobodys")
    await scene.until_phase("never", "Pending", process=process)
    await _delete(scene, "never", propagation="Background")
    await scene.until_gone("never", process=process)
    connection = redis.asyncio.Redis.from_url(scene.redis_url)
    try:
        for _ in range(10):  # The step for the vanished Execution comes just after it is gone.
            assert await connection.exists(store_.key("agentihooks-swarm", "nobodys", keys.NAMESPACE)) == 0
            await asyncio.sleep(0.5)
    finally:
        await connection.aclose()
