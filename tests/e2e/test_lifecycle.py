"""One lifecycle per Execution, with the operator running as users run it: a deletion racing a
capture, many deletions racing their workers' failures, and a name used again.

Each of these lost evidence or left a worker behind while two code paths (the passes and kopf's
delete handler) advanced the same attempt at once, and while a new Execution could take an old
one's records as its own.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch as kwatch
from kubernetes_asyncio.client.exceptions import ApiException

from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import model
from tests.support import commands, pods, watching
from tests.support.fixtures_scene import Scene
from tests.support.marked_workers import (
    SLUG,
    assert_one_capture_of_its_own,
    executions_left,
    fail_worker,
    journal_entries,
    launch_marked,
    marker,
    plant_marker,
    worker_pods,
)
from tests.support.operator_process import OperatorProcess
from tests.support.planting import as_the_operator_makes_it
from tests.support.proxy import FaultProxy


def fails(*, run_for: str = "1s") -> dict[str, str]:
    """A worker that runs ``run_for``, then fails with exit 3."""
    return pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for=run_for)


async def retained_of(scene: Scene, name: str) -> Any:
    return await scene.stored(slug=SLUG, name="attempt-retained", execution=name)


async def test_an_execution_deleted_while_its_pod_is_captured_keeps_one_capture_and_one_delete(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene
) -> None:
    name, namespace = "deleted-mid-capture", scene.namespace
    pod = labels.worker_pod_name(execution=name, generation=1)
    log_path = rf"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    # The first log read of the worker is answered 2.5 s late (within the operator's 3 s API
    # timeout): the step that captures it is in the middle of it while the Execution is deleted.
    threaded_fault_proxy.delay(seconds=2.5, method="GET", path=log_path, times=1)
    process = await launch_marked(
        scene, execution=name, kubeconfig=fault_proxy_kubeconfig, behaviour=fails(run_for="2s")
    )

    async def reading() -> bool:
        return threaded_fault_proxy.count(method="GET", path=log_path) >= 1

    await scene.until(reading, what="the capture's log read", process=process, timeout=60)
    await scene.delete(name)
    retained = await scene.until_cleaned_up(name, slug=SLUG, process=process)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    deletes = threaded_fault_proxy.count(method="DELETE", path=rf"/api/v1/namespaces/{namespace}/pods/{pod}")
    assert deletes == 1
    assert threaded_fault_proxy.count(method="GET", path=log_path) == 1  # Captured once.
    assert await journal_entries(scene.redis_url) == {}
    assert await worker_pods(scene.api, namespace) == []


class CancelOnFailure:
    """A CI system cancelling its runs: it watches the workers, and deletes each Execution as soon
    as its worker Pod fails (without waiting for one deletion before the next); and those whose
    worker the operator cleaned up first (Done) it deletes too."""

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.raced: set[str] = set()  # Deleted the moment its worker was seen Failed: the race with cleanup.
        self.deleted: set[str] = set()

    async def delete_quietly(self, execution: str) -> None:
        try:
            await self.scene.delete(execution)
        except ApiException as e:
            if e.status != 404:
                raise

    async def watch(self) -> None:
        async with asyncio.TaskGroup() as deleting:
            watch = kwatch.Watch()
            async with watch.stream(
                client.CoreV1Api(self.scene.api).list_namespaced_pod,
                self.scene.namespace,
                label_selector=f"{labels.OWNER}={labels.owner(SLUG)}",
            ) as stream:
                async for event in stream:
                    pod = event["object"]
                    execution = pod.metadata.labels[labels.EXECUTION]
                    if pod.status.phase == "Failed" and execution not in self.deleted:
                        self.deleted.add(execution)
                        self.raced.add(execution)
                        deleting.create_task(self.delete_quietly(execution))

    async def all_gone(self) -> bool:
        left = await executions_left(self.scene.api, self.scene.namespace)
        for execution in left:  # Those whose worker the operator cleaned up first are Done: go too.
            try:
                if (await self.scene.status(execution)).get(
                    "phase"
                ) == "Done" and execution not in self.deleted:
                    self.deleted.add(execution)
                    await self.scene.delete(execution)
            except ApiException as e:
                if e.status != 404:  # Gone meanwhile.
                    raise
        return not left


async def test_executions_deleted_the_moment_their_workers_fail_all_keep_their_captures(scene: Scene) -> None:
    """As a CI system cancelling its runs does: each Execution is deleted as soon as its worker
    Pod is Failed, while the operator's own resync (every 0.5 s) reaches the same attempt."""
    names = [f"race-{i:02d}" for i in range(60)]
    await asyncio.gather(
        *(plant_marker(scene.cluster, namespace=scene.namespace, execution=n) for n in names)
    )
    process = scene.start(env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "0.5"})
    await scene.swarm(name=SLUG, annotations=fails(run_for="3s"))
    ci = CancelOnFailure(scene)
    cancelling = asyncio.create_task(ci.watch())
    await asyncio.sleep(1)  # The CI's watch is open before its runs start.
    for n in names:
        await scene.execution(name=n, swarm=SLUG)
    try:
        await scene.until(ci.all_gone, what="every Execution gone", process=process, timeout=240)
    finally:
        cancelling.cancel()
        [ended] = await asyncio.gather(cancelling, return_exceptions=True)
    assert isinstance(ended, asyncio.CancelledError), f"the watch ended: {ended!r}"
    assert ci.deleted == set(names)
    assert len(ci.raced) >= 50, f"only {len(ci.raced)} deletions raced: not {sorted(set(names) - ci.raced)}"
    for n in names:
        assert_one_capture_of_its_own(await retained_of(scene, n), execution=n, exit_code=3)
    assert await journal_entries(scene.redis_url) == {}
    assert await worker_pods(scene.api, scene.namespace) == []


@pytest.mark.parametrize("outcome", ["refused", "failed"])
async def test_a_name_used_again_is_refused_visibly_until_its_records_are_forgotten(
    scene: Scene, outcome: str
) -> None:
    name = f"again-{outcome}"
    project = "allowed" if outcome == "failed" else "outside"
    process = await launch_marked(scene, execution=name, project=project, behaviour=fails())
    first = await scene.until_phase(name, "Done", process=process, timeout=30)
    first_uid = (await scene.get(name))["metadata"]["uid"]
    kept = await retained_of(scene, name)
    await scene.delete(name)
    await scene.until_gone(name, process=process, timeout=30)
    # The same manifest again (GitOps, a retried pipeline).
    await scene.execution(name=name, swarm=SLUG, project=project)
    refused = await scene.until_phase(name, "Invalid", process=process, timeout=30)
    [invalid] = [c for c in refused["conditions"] if c["type"] == "Invalid"]
    assert invalid["reason"] == "NameInUse" and f"records forget {SLUG} {name}" in invalid["message"]
    assert first_uid in invalid["message"]
    assert await worker_pods(scene.api, scene.namespace) == []  # Never launched: no Pod to leak.
    await asyncio.sleep(3)  # A few resyncs later: still nothing launched, nothing changed.
    assert await worker_pods(scene.api, scene.namespace) == []
    assert await retained_of(scene, name) == kept
    await scene.events_once(name, reasons={"NameInUse"}, process=process)
    # Freed, and asked to launch again: it runs its own attempt, with its own records.
    freed = commands.records_forget(
        slug=SLUG, execution=name, redis_url=scene.redis_url, kubeconfig=scene.cluster.kubeconfig
    )
    assert freed.returncode == 0 and "the name is free" in freed.stdout, freed
    await watching.merge_patch(
        scene.api,
        namespace=scene.namespace,
        plural="executions",
        name=name,
        body={"metadata": {"annotations": {"relaunch.swarm.agentihooks.io/swarm": "after-forget"}}},
    )
    second = await scene.until_phase(name, "Done", process=process, timeout=30)
    assert second["outcome"] == first["outcome"]
    owner = await scene.stored(slug=SLUG, name="execution-owners", execution=name)
    second_uid = (await scene.get(name))["metadata"]["uid"]
    assert owner["uid"] == second_uid != first_uid
    assert await worker_pods(scene.api, scene.namespace) == []
    assert json.dumps(await journal_entries(scene.redis_url)) == "{}"


async def test_kopf_run_hosts_the_same_operator(scene: Scene) -> None:
    """``kopf run -m agentihooks_swarm.handlers``: kopf's CLI hosts the operator; a refused worker
    is captured and cleaned up as with ``python -m agentihooks_swarm run``."""
    name = "hosted"
    process = await launch_marked(scene, execution=name, via_kopf=True, behaviour=fails())
    await scene.until_phase(name, "Done", process=process)
    assert_one_capture_of_its_own(await retained_of(scene, name), execution=name, exit_code=3)
    process.stop()
    assert "agentihooks-swarm stopping" in process.log()


async def test_an_execution_deleted_before_its_hand_was_written_still_has_its_worker_cleaned_up(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene
) -> None:
    """The soak found it on the version before: a launch created the worker, the status that
    records its hand could not be written, and the Execution was deleted; its delete handler saw no
    hand and let it go, and the worker was left. The name's claim says a launch may have begun."""
    name = "deleted-unrecorded"
    pod = labels.worker_pod_name(execution=name, generation=1)
    status_path = (
        rf"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{scene.namespace}/executions/{name}/status"
    )
    threaded_fault_proxy.fail(status=500, method="PATCH", path=status_path, times=None)
    process = await launch_marked(scene, execution=name, kubeconfig=fault_proxy_kubeconfig, behaviour=fails())

    async def launched() -> bool:
        return await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod)

    await scene.until(launched, what="the worker launched", process=process)
    assert not await scene.status(name)
    await scene.delete(name)
    threaded_fault_proxy.clear_rules()
    retained = await scene.until_cleaned_up(name, slug=SLUG, process=process)
    assert await worker_pods(scene.api, scene.namespace) == []
    assert retained["final"]["state"] == "cancelled"
    [entry] = retained["removed"]["pods"]
    # The garbage collector deletes the worker once its Execution is gone: the cleanup judges it
    # as found (terminating, held by its evidence finalizer), releases it, and finds it absent.
    assert entry["name"] == pod and entry["outcome"] in ("deleted", "absent_after_send", "absent")
    assert await journal_entries(scene.redis_url) == {}


async def until_handed(scene: Scene, name: str, *, process: OperatorProcess) -> None:
    async def handed() -> bool:
        return ((await scene.status(name)).get("hand") or {}).get("handed") is True

    await scene.until(handed, what=f"{name} handed", process=process, timeout=60)


async def test_an_execution_that_vanished_while_no_operator_watched_still_has_its_worker_cleaned_up(
    scene: Scene,
) -> None:
    """An Execution carries no finalizer of the operator's, so one deleted while no operator runs
    (or before the operator that saw it go ended its cleanup) is gone at once: the next operator
    finds the worker Pod, asks Redis whose it was, and cleans up (capture first)."""
    name = "vanished"
    pod = labels.worker_pod_name(execution=name, generation=1)
    process = await launch_marked(scene, execution=name, behaviour=pods.protocol_annotations(phase="Running"))
    await until_handed(scene, name, process=process)
    process.stop()
    assert not (await scene.get(name))["metadata"].get("finalizers")
    await scene.delete(name)
    assert not await scene.exists(name)
    await fail_worker(scene.api, namespace=scene.namespace, pod=pod, exit_code=3, reason="Error")

    successor = scene.start()

    async def cleaned_up() -> bool:
        # The garbage collector deleted the worker once its Execution was gone; held by its
        # evidence finalizer, it is captured and released, and a later pass finds it absent.
        pods_left = await worker_pods(scene.api, scene.namespace)
        return pods_left == [] and await retained_of(scene, name) is not None

    await scene.until(cleaned_up, what="the orphaned worker cleaned up", process=successor, timeout=90)
    retained = await retained_of(scene, name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert retained["final"]["state"] == "cancelled"
    assert await journal_entries(scene.redis_url) == {}
    assert (
        f"Execution {scene.namespace}/{name}" in successor.log()
        and "is gone, but its worker pod" in successor.log()
    )


async def test_a_pod_that_fails_after_the_read_that_judged_it_is_captured_not_deleted_unseen(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene
) -> None:
    """The soak found it (seed 20261201, 7 Pods): a cancelled attempt's cleanup read its worker
    running, in an answer that came seconds late; the worker failed meanwhile, and the delete,
    sent for the Pod as read, removed a refused Pod without its capture. The delete now names the
    resourceVersion it judged, so a Pod that changed is read and judged again."""
    name, namespace = "failed-after-read", scene.namespace
    pod = labels.worker_pod_name(execution=name, generation=1)
    process = await launch_marked(
        scene,
        execution=name,
        kubeconfig=fault_proxy_kubeconfig,
        behaviour=pods.protocol_annotations(phase="Running"),
    )
    await until_handed(scene, name, process=process)
    await pods.wait_for_phase(scene.api, namespace=namespace, name=pod, phase="Running", timeout=60)
    # The cancelled step's read of the worker (the one its cleanup judges it by) is answered 2 s
    # after the API server made it (within the operator's 3 s API timeout); the worker fails in
    # between.
    pod_path = rf"/api/v1/namespaces/{namespace}/pods/{pod}"
    before = threaded_fault_proxy.count(method="GET", path=pod_path)
    threaded_fault_proxy.delay(seconds=2.0, method="GET", path=pod_path, times=1, after_forward=True)
    await scene.delete(name)

    async def reading() -> bool:
        return threaded_fault_proxy.count(method="GET", path=pod_path) > before

    await scene.until(reading, what="the step's read of the worker", process=process)
    await asyncio.sleep(0.5)  # The read has been answered (loopback): what it says is Running.
    await fail_worker(scene.api, namespace=namespace, pod=pod, exit_code=3, reason="Error")
    retained = await scene.until_cleaned_up(name, slug=SLUG, process=process)
    assert retained["final"]["state"] == "cancelled"
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert await worker_pods(scene.api, namespace) == []


async def test_launch_removal_captures_a_pod_that_fails_after_the_read_that_judged_it(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene
) -> None:
    """The soak found it (seed 20261201 at 6 a second, pod x03261-1): launch removal read a
    refused hand's worker while it was starting, the worker failed (OOMKilled) while that answer
    was on its way, and the delete removed a failed Pod with no capture. The delete now names the
    resourceVersion it judged, so the Pod that changed is read, captured and then deleted."""
    name, namespace = "fails-during-removal", scene.namespace
    pod = await plant_marker(scene.cluster, namespace=namespace, execution=name)
    # Before the operator runs: the Execution, and its worker Pod as a launch that stopped before
    # recording its hand leaves it (owned by the Execution), still Running.
    await scene.swarm(name=SLUG, projects=["registered"])
    await scene.execution(name=name, swarm=SLUG, project="outside")
    uid = (await scene.get(name))["metadata"]["uid"]
    attempt = model.Attempt(namespace=namespace, slug=SLUG, execution=name, generation=1, owner_uid=uid)
    planted: Any = pods.worker_pod(
        name=pod,
        namespace=namespace,
        phase="Running",
        labels=attempt.labels,
        **as_the_operator_makes_it(attempt),
    )
    await client.CoreV1Api(scene.api).create_namespaced_pod(namespace, planted)
    await pods.wait_for_phase(scene.api, namespace=namespace, name=pod, phase="Running", timeout=60)
    # The launch adopts the Pod (as its watch saw it, or by a create that answers 409 and a read),
    # the hand is refused (a project outside the registration), and launch removal's read is
    # answered 2 s after the API server made it.
    pod_path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    threaded_fault_proxy.delay(seconds=2.0, method="GET", path=pod_path, times=2, after_forward=True)
    process = scene.start(kubeconfig=fault_proxy_kubeconfig)

    async def removal_read() -> bool:
        created = threaded_fault_proxy.count(method="POST", path=f"/api/v1/namespaces/{namespace}/pods")
        return threaded_fault_proxy.count(method="GET", path=pod_path) >= (2 if created else 1)

    await scene.until(removal_read, what="launch removal's read", process=process, timeout=60)
    await asyncio.sleep(0.5)  # The read has been answered (loopback): what it says is Running.
    await fail_worker(scene.api, namespace=namespace, pod=pod, exit_code=137, reason="OOMKilled")

    async def removed() -> bool:
        return await worker_pods(scene.api, namespace) == []

    await scene.until(removed, what="the worker removed", process=process, timeout=60)
    record = await scene.stored(slug=SLUG, name="attempt-startup-diagnostics", execution=name)
    assert record is not None, "launch removal deleted the failed Pod without storing its capture"
    assert record["pod"] == pod
    [container] = record["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 137
    assert container["log"].endswith(marker(name).decode()), container["log"]


async def test_a_launch_whose_status_was_not_written_goes_on_from_its_recorded_hand(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene
) -> None:
    """The soak found it (seed 20261201, 16 Pods): one step launched a worker, saw it refused and
    cleaned it up, and then its status patch failed; the next step found no hand in the status and
    launched a second worker, which was never cleaned up (the attempt was already retained). The
    next step now goes on from the hand recorded in Redis."""
    name = "unwritten-status"
    status_path = (
        rf"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{scene.namespace}/executions/{name}/status"
    )
    # Every status patch fails until the attempt is over (refused at the hand: launched, captured,
    # removed and retained in the launch's step).
    threaded_fault_proxy.fail(status=504, method="PATCH", path=status_path, times=None)
    process = await launch_marked(
        scene, execution=name, kubeconfig=fault_proxy_kubeconfig, project="outside", behaviour=fails()
    )
    await scene.until(
        lambda: retained_of(scene, name), what="the attempt retained", process=process, timeout=60
    )
    created = rf"/api/v1/namespaces/{scene.namespace}/pods"
    await asyncio.sleep(3)  # Steps that follow, with their status patches still failing.
    threaded_fault_proxy.clear_rules()
    status = await scene.until_phase(name, "Done", process=process)
    assert status["outcome"] == "refused" and status["hand"]["handed"] is False
    assert threaded_fault_proxy.count(method="POST", path=created) == 1  # One worker, never a second.
    assert await worker_pods(scene.api, scene.namespace) == []
    assert "going on from its recorded hand" in process.log()
