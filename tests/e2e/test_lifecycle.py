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
from tests.support import builders, commands, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.marked_workers import (
    SLUG,
    assert_one_capture_of_its_own,
    delete_execution,
    executions_left,
    fail_worker,
    journal_entries,
    marker,
    plant_marker,
    worker_pods,
)
from tests.support.proxy import FaultProxy


async def test_an_execution_deleted_while_its_pod_is_captured_keeps_one_capture_and_one_delete(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
) -> None:
    name = "deleted-mid-capture"
    pod = await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="2s")
    log_path = rf"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    # The first log read of the worker is answered 2.5 s late (within the operator's 3 s API
    # timeout): the step that captures it is in the middle of it while the Execution is deleted.
    threaded_fault_proxy.delay(seconds=2.5, method="GET", path=log_path, times=1)
    process = operator(kubeconfig=fault_proxy_kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def reading() -> bool:
        return threaded_fault_proxy.count(method="GET", path=log_path) >= 1

    await watching.eventually(reading, what="the capture's log read", operator=process, timeout=60)
    await delete_execution(admin_api, namespace, name)

    async def gone() -> bool:
        return name not in await executions_left(admin_api, namespace)

    await watching.eventually(gone, what=f"{name} to be gone", operator=process, timeout=60)
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    deletes = threaded_fault_proxy.count(method="DELETE", path=rf"/api/v1/namespaces/{namespace}/pods/{pod}")
    assert deletes == 1
    assert threaded_fault_proxy.count(method="GET", path=log_path) == 1  # Captured once.
    assert await journal_entries(redis_url) == {}
    assert await worker_pods(admin_api, namespace) == []


async def test_executions_deleted_the_moment_their_workers_fail_all_keep_their_captures(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    """As a CI system cancelling its runs does: each Execution is deleted as soon as its worker
    Pod is Failed, while the operator's own resync (every 0.5 s) reaches the same attempt."""
    names = [f"race-{i:02d}" for i in range(60)]
    await asyncio.gather(
        *(
            pods.plant_log(
                cluster=control_plane,
                namespace=namespace,
                pod=labels.worker_pod_name(execution=n, generation=1),
                container="worker",
                content=marker(n),
            )
            for n in names
        )
    )
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="3s")
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "0.5"},
    )
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    raced: set[str] = set()  # Deleted the moment its worker was seen Failed: the race with cleanup.
    deleted: set[str] = set()

    async def delete_quietly(execution: str) -> None:
        try:
            await delete_execution(admin_api, namespace, execution)
        except ApiException as e:
            if e.status != 404:
                raise

    async def cancel_on_failure() -> None:
        """A CI system cancelling its runs: it watches the workers, and deletes each Execution as
        soon as its worker Pod fails (without waiting for one deletion before the next)."""
        async with asyncio.TaskGroup() as deleting:
            watch = kwatch.Watch()
            async with watch.stream(
                client.CoreV1Api(admin_api).list_namespaced_pod,
                namespace,
                label_selector=f"{labels.OWNER}={labels.owner(SLUG)}",
            ) as stream:
                async for event in stream:
                    pod = event["object"]
                    execution = pod.metadata.labels[labels.EXECUTION]
                    if pod.status.phase == "Failed" and execution not in deleted:
                        deleted.add(execution)
                        raced.add(execution)
                        deleting.create_task(delete_quietly(execution))

    cancelling = asyncio.create_task(cancel_on_failure())
    await asyncio.sleep(1)  # The CI's watch is open before its runs start.
    for n in names:
        await watching.create(admin_api, builders.execution(name=n, namespace=namespace, swarm=SLUG))

    async def all_gone() -> bool:
        left = await executions_left(admin_api, namespace)
        for execution in left:  # Those whose worker the operator cleaned up first are Done: go too.
            try:
                found = await watching.execution(admin_api, namespace=namespace, name=execution)
                if (found.get("status") or {}).get("phase") == "Done" and execution not in deleted:
                    deleted.add(execution)
                    await delete_execution(admin_api, namespace, execution)
            except ApiException as e:
                if e.status != 404:  # Gone meanwhile.
                    raise
        return not left

    try:
        await watching.eventually(all_gone, what="every Execution gone", operator=process, timeout=240)
    finally:
        cancelling.cancel()
        [ended] = await asyncio.gather(cancelling, return_exceptions=True)
    assert isinstance(ended, asyncio.CancelledError), f"the watch ended: {ended!r}"
    assert deleted == set(names)
    assert len(raced) >= 50, f"only {len(raced)} deletions raced: not {sorted(set(names) - raced)}"
    for n in names:
        retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=n)
        assert_one_capture_of_its_own(retained, execution=n, exit_code=3)
    assert await journal_entries(redis_url) == {}
    assert await worker_pods(admin_api, namespace) == []


@pytest.mark.parametrize("outcome", ["refused", "failed"])
async def test_a_name_used_again_is_refused_visibly_until_its_records_are_forgotten(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    outcome: str,
) -> None:
    name = f"again-{outcome}"
    await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="1s")
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    project = "allowed" if outcome == "failed" else "outside"
    manifest = builders.execution(name=name, namespace=namespace, swarm=SLUG, project=project)

    async def phase_of(wanted: str) -> dict[str, Any] | None:
        found = (await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {}
        return found if found.get("phase") == wanted else None

    await watching.create(admin_api, manifest)
    first = await watching.eventually(lambda: phase_of("Done"), what="the first to be Done", operator=process)
    first_uid = (await watching.execution(admin_api, namespace=namespace, name=name))["metadata"]["uid"]
    kept = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    await delete_execution(admin_api, namespace, name)

    async def gone() -> bool:
        return name not in await executions_left(admin_api, namespace)

    await watching.eventually(gone, what="the first to be gone", operator=process)
    # The same manifest again (GitOps, a retried pipeline).
    await watching.create(admin_api, manifest)
    refused = await watching.eventually(
        lambda: phase_of("Invalid"), what="the second refused", operator=process
    )
    [invalid] = [c for c in refused["conditions"] if c["type"] == "Invalid"]
    assert invalid["reason"] == "NameInUse" and f"records forget {SLUG} {name}" in invalid["message"]
    assert first_uid in invalid["message"]
    assert await worker_pods(admin_api, namespace) == []  # Never launched: no Pod to leak.
    await asyncio.sleep(3)  # A few resyncs later: still nothing launched, nothing changed.
    assert await worker_pods(admin_api, namespace) == []
    assert await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name) == kept
    await watching.events_once(
        admin_api, namespace=namespace, name=name, reasons={"NameInUse"}, operator=process
    )
    # Freed, and asked to launch again: it runs its own attempt, with its own records.
    freed = commands.records_forget(
        slug=SLUG, execution=name, redis_url=redis_url, kubeconfig=control_plane.kubeconfig
    )
    assert freed.returncode == 0 and "the name is free" in freed.stdout, freed
    await watching.merge_patch(
        admin_api,
        namespace=namespace,
        plural="executions",
        name=name,
        body={"metadata": {"annotations": {"relaunch.swarm.agentihooks.io/swarm": "after-forget"}}},
    )
    second = await watching.eventually(
        lambda: phase_of("Done"), what="the second to be Done", operator=process
    )
    assert second["outcome"] == first["outcome"]
    owner = await watching.stored(redis_url, slug=SLUG, name="execution-owners", execution=name)
    second_uid = (await watching.execution(admin_api, namespace=namespace, name=name))["metadata"]["uid"]
    assert owner["uid"] == second_uid != first_uid
    assert await worker_pods(admin_api, namespace) == []
    assert json.dumps(await journal_entries(redis_url)) == "{}"


async def test_kopf_run_hosts_the_same_operator(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    """``kopf run -m agentihooks_swarm.handlers``: kopf's CLI hosts the operator; a refused worker
    is captured and cleaned up as with ``python -m agentihooks_swarm run``."""
    name = "hosted"
    await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="1s")
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace, via_kopf=True)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def done() -> bool:
        status = (await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {}
        return status.get("phase") == "Done"

    await watching.eventually(done, what=f"{name} Done under kopf run", operator=process, timeout=60)
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    process.stop()
    assert "agentihooks-swarm stopping" in process.log()


async def test_an_execution_deleted_before_its_hand_was_written_still_has_its_worker_cleaned_up(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
) -> None:
    """The soak found it on the version before: a launch created the worker, the status that
    records its hand could not be written, and the Execution was deleted; its delete handler saw no
    hand and let it go, and the worker was left. The name's claim says a launch may have begun."""
    name = "deleted-unrecorded"
    pod = await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="1s")
    status_path = rf"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/executions/{name}/status"
    threaded_fault_proxy.fail(status=500, method="PATCH", path=status_path, times=None)
    process = operator(kubeconfig=fault_proxy_kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def launched() -> bool:
        return await watching.pod_exists(admin_api, namespace=namespace, name=pod)

    await watching.eventually(launched, what="the worker launched", operator=process)
    assert not ((await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {})
    await delete_execution(admin_api, namespace, name)
    threaded_fault_proxy.clear_rules()

    async def gone() -> bool:
        return name not in await executions_left(admin_api, namespace)

    await watching.eventually(gone, what=f"{name} gone", operator=process, timeout=60)
    assert await worker_pods(admin_api, namespace) == []
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert retained is not None and retained["final"]["state"] == "cancelled"
    [entry] = retained["removed"]["pods"]
    assert entry["name"] == pod and entry["outcome"] in ("deleted", "absent_after_send")
    assert await journal_entries(redis_url) == {}


async def test_an_execution_that_vanished_while_no_operator_watched_still_has_its_worker_cleaned_up(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    """The soak found it: a delete that read the Execution just before its finalizer was added
    deleted it just after (the API server decides on its read; etcd's history showed the object go
    from "finalizer added" to deleted), and the operator that saw it go was restarted before its
    cleanup ended. Here its finalizer is removed by hand while no operator runs; the next operator
    finds the worker Pod, asks Redis whose it was, and cleans up (capture first)."""
    name = "vanished"
    pod = await plant_marker(control_plane, namespace=namespace, execution=name)
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    behaviour = pods.protocol_annotations(phase="Running")
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def handed() -> bool:
        found = await watching.execution(admin_api, namespace=namespace, name=name)
        return ((found.get("status") or {}).get("hand") or {}).get("handed") is True

    await watching.eventually(handed, what=f"{name} handed", operator=process, timeout=60)
    process.stop()
    await watching.merge_patch(
        admin_api,
        namespace=namespace,
        plural="executions",
        name=name,
        body={"metadata": {"finalizers": None}},
    )
    await delete_execution(admin_api, namespace, name)
    assert name not in await executions_left(admin_api, namespace)
    await fail_worker(admin_api, namespace=namespace, pod=pod, exit_code=3, reason="Error")

    successor = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)

    async def cleaned_up() -> bool:
        return await worker_pods(admin_api, namespace) == []

    await watching.eventually(
        cleaned_up, what="the orphaned worker cleaned up", operator=successor, timeout=90
    )
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert retained["final"]["state"] == "cancelled"
    assert await journal_entries(redis_url) == {}
    assert (
        f"Execution {namespace}/{name}" in successor.log()
        and "is gone, but its worker pod" in successor.log()
    )


async def test_a_pod_that_fails_after_the_read_that_judged_it_is_captured_not_deleted_unseen(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
) -> None:
    """The soak found it (seed 20261201, 7 Pods): a cancelled attempt's cleanup read its worker
    running, in an answer that came seconds late; the worker failed meanwhile, and the delete,
    sent for the Pod as read, removed a refused Pod without its capture. The delete now names the
    resourceVersion it judged, so a Pod that changed is read and judged again."""
    name = "failed-after-read"
    pod = await plant_marker(control_plane, namespace=namespace, execution=name)
    process = operator(kubeconfig=fault_proxy_kubeconfig, namespace=namespace)
    running = pods.protocol_annotations(phase="Running")
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=running))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def handed() -> bool:
        status = (await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {}
        return bool((status.get("hand") or {}).get("handed"))

    await watching.eventually(handed, what="the hand", operator=process)
    await pods.wait_for_phase(admin_api, namespace=namespace, name=pod, phase="Running", timeout=60)
    # Cleanup's list of the attempt's Pods is answered 2 s after the API server made it (within the
    # operator's 3 s API timeout); the worker fails in between.
    pods_path = rf"/api/v1/namespaces/{namespace}/pods"
    threaded_fault_proxy.delay(
        seconds=2.0, method="GET", path=pods_path, query="labelSelector=", times=1, after_forward=True
    )
    await delete_execution(admin_api, namespace, name)

    async def listing() -> bool:
        return threaded_fault_proxy.count(method="GET", path=pods_path, query="labelSelector=") >= 1

    await watching.eventually(listing, what="cleanup's list of the Pods", operator=process, timeout=30)
    await asyncio.sleep(0.5)  # The list has been answered (loopback): what it says is Running.
    await fail_worker(admin_api, namespace=namespace, pod=pod, exit_code=3, reason="Error")

    async def gone() -> bool:
        return name not in await executions_left(admin_api, namespace)

    await watching.eventually(gone, what=f"{name} gone", operator=process, timeout=60)
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert retained is not None and retained["final"]["state"] == "cancelled"
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert await worker_pods(admin_api, namespace) == []


async def test_launch_removal_captures_a_pod_that_fails_after_the_read_that_judged_it(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
) -> None:
    """The soak found it (seed 20261201 at 6 a second, pod x03261-1): launch removal read a
    refused hand's worker while it was starting, the worker failed (OOMKilled) while that answer
    was on its way, and the delete removed a failed Pod with no capture. The delete now names the
    resourceVersion it judged, so the Pod that changed is read, captured and then deleted."""
    name = "fails-during-removal"
    pod = await plant_marker(control_plane, namespace=namespace, execution=name)
    planted: Any = pods.worker_pod(
        name=pod,
        namespace=namespace,
        phase="Running",
        labels=labels.attempt(slug=SLUG, execution=name, generation=1),
    )
    await client.CoreV1Api(admin_api).create_namespaced_pod(namespace, planted)
    await pods.wait_for_phase(admin_api, namespace=namespace, name=pod, phase="Running", timeout=60)
    # The launch adopts the Pod (its first read), the hand is refused (a project outside the
    # registration), and launch removal's read is answered 2 s after the API server made it.
    pod_path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    threaded_fault_proxy.delay(seconds=0.0, method="GET", path=pod_path, times=1)
    threaded_fault_proxy.delay(seconds=2.0, method="GET", path=pod_path, times=1, after_forward=True)
    process = operator(kubeconfig=fault_proxy_kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"]))
    await watching.create(
        admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG, project="outside")
    )

    async def removal_read() -> bool:
        return threaded_fault_proxy.count(method="GET", path=pod_path) >= 2

    await watching.eventually(removal_read, what="launch removal's read", operator=process, timeout=60)
    await asyncio.sleep(0.5)  # The read has been answered (loopback): what it says is Running.
    await fail_worker(admin_api, namespace=namespace, pod=pod, exit_code=137, reason="OOMKilled")

    async def removed() -> bool:
        return await worker_pods(admin_api, namespace) == []

    await watching.eventually(removed, what="the worker removed", operator=process, timeout=60)
    record = await watching.stored(redis_url, slug=SLUG, name="attempt-startup-diagnostics", execution=name)
    assert record is not None, "launch removal deleted the failed Pod without storing its capture"
    assert record["pod"] == pod
    [container] = record["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 137
    assert container["log"].endswith(marker(name).decode()), container["log"]


async def test_a_launch_whose_status_was_not_written_goes_on_from_its_recorded_hand(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
) -> None:
    """The soak found it (seed 20261201, 16 Pods): one step launched a worker, saw it refused and
    cleaned it up, and then its status patch failed; the next step found no hand in the status and
    launched a second worker, which was never cleaned up (the attempt was already retained). The
    next step now goes on from the hand recorded in Redis."""
    name = "unwritten-status"
    await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="1s")
    status_path = rf"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/executions/{name}/status"
    # Every status patch fails until the attempt is over (refused at the hand: launched, captured,
    # removed and retained in the launch's step).
    threaded_fault_proxy.fail(status=504, method="PATCH", path=status_path, times=None)
    process = operator(kubeconfig=fault_proxy_kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(
        admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG, project="outside")
    )

    async def retained() -> Any:
        return await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)

    await watching.eventually(retained, what="the attempt retained", operator=process, timeout=60)
    created = rf"/api/v1/namespaces/{namespace}/pods"
    await asyncio.sleep(3)  # Steps that follow, with their status patches still failing.
    threaded_fault_proxy.clear_rules()

    async def done() -> dict[str, Any] | None:
        status = (await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {}
        return status if status.get("phase") == "Done" else None

    status = await watching.eventually(done, what=f"{name} Done", operator=process, timeout=60)
    assert status["outcome"] == "refused" and status["hand"]["handed"] is False
    assert threaded_fault_proxy.count(method="POST", path=created) == 1  # One worker, never a second.
    assert await worker_pods(admin_api, namespace) == []
    assert "going on from its recorded hand" in process.log()
