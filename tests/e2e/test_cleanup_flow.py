"""Final cleanup with the operator running: finality, the archive wait, retained evidence,
restart safety under SIGKILL, deleted Executions, and two replicas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from kubernetes_asyncio import client

from agentihooks_swarm import settings, store as store_
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.worker import reports as worker
from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.failing_workers import SLUG, key, start_failing_worker
from tests.support.fixtures_operator import OperatorFactory
from tests.support.planting import PLANTED
from tests.support.proxy import FaultProxy
from tests.support.watching import status_of, wait_done


async def test_worker_failing_after_the_hand_is_captured_by_final_cleanup(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await start_failing_worker(admin_api, control_plane, namespace=namespace, execution="fails-late")
    status = await wait_done(admin_api, namespace, "fails-late", process)
    assert status["hand"] == {"handed": True}  # A merge patch leaves out the null reason and removed.
    assert status["outcome"] == "failed"
    pod = labels.worker_pod_name(execution="fails-late", generation=1)
    assert status["cleanup"]["pods"] == {pod: "deleted"}
    assert not await watching.pod_exists(admin_api, namespace=namespace, name=pod)

    connection = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        retained = json.loads(await connection.hget(key("attempt-retained"), "fails-late") or "null")
        assert await connection.hget(key("cleanup-journal"), "fails-late") is None
        final = json.loads(await connection.hget(key("attempt-finals"), "fails-late") or "null")
        assert await connection.hget(key("attempt-startup-diagnostics"), "fails-late") is None
    finally:
        await connection.aclose()
    assert (final["state"], final["transcript_end"]) == ("failed", 0)
    assert retained["final"] == final
    [entry] = retained["removed"]["pods"]
    assert entry["outcome"] == "deleted" and "log_reads" not in entry
    [container] = entry["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    assert container["log"].endswith(PLANTED.decode())
    await watching.events_once(
        admin_api,
        namespace=namespace,
        name="fails-late",
        reasons={"Handed", "AttemptFinal", "CleanupFinished"},
    )


async def test_cleanup_waits_for_the_transcript_archive(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    reporter = store_.connect(settings.Settings(redis_url=redis_url))
    worker.heartbeat(
        store=reporter, slug=SLUG, execution="archives", generation=1, transcript=100, archived=40
    )
    await start_failing_worker(admin_api, control_plane, namespace=namespace, execution="archives")

    async def archiving() -> dict[str, Any] | None:
        status = await status_of(admin_api, namespace, "archives")
        return status if status.get("phase") == "Archiving" else None

    status = await watching.eventually(archiving, what="the archive wait", operator=process, timeout=60)
    assert "watermark 40 of 100" in status["waitingFor"]
    pod = labels.worker_pod_name(execution="archives", generation=1)
    assert await watching.pod_exists(admin_api, namespace=namespace, name=pod)
    worker.heartbeat(
        store=reporter, slug=SLUG, execution="archives", generation=1, transcript=100, archived=100
    )
    status = await wait_done(admin_api, namespace, "archives", process)
    retained = json.loads(reporter.redis.hget(reporter.key(SLUG, "attempt-retained"), "archives") or "null")
    assert (retained["watermark"], retained["archived"], retained["final"]["transcript_end"]) == (
        100,
        True,
        100,
    )
    reporter.redis.close()


async def test_archive_deadline_lets_cleanup_go_ahead_and_says_so(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_ARCHIVE_DEADLINE_SECONDS": "2"},
    )
    reporter = store_.connect(settings.Settings(redis_url=redis_url))
    worker.heartbeat(store=reporter, slug=SLUG, execution="deadline", generation=1, transcript=10, archived=0)
    await start_failing_worker(admin_api, control_plane, namespace=namespace, execution="deadline")
    await wait_done(admin_api, namespace, "deadline", process)
    retained = json.loads(reporter.redis.hget(reporter.key(SLUG, "attempt-retained"), "deadline") or "null")
    assert (retained["archived"], retained["watermark"]) == (False, 0)
    found = await watching.events_once(
        admin_api, namespace=namespace, name="deadline", reasons={"CleanupFinished"}, operator=process
    )
    messages = [m for _, r, m in found if r == "CleanupFinished"]
    assert messages and "archive deadline passed" in messages[0]
    reporter.redis.close()


async def test_deleting_an_execution_cancels_and_cleans_up_its_attempt(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await start_failing_worker(
        admin_api,
        control_plane,
        namespace=namespace,
        execution="deleted",
        annotations=pods.protocol_annotations(phase="Running"),
    )

    async def running() -> bool:
        return (await status_of(admin_api, namespace, "deleted")).get("phase") == "Running"

    await watching.eventually(running, what="the worker running", operator=process)
    await client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions", "deleted"
    )

    async def gone() -> bool:
        try:
            await watching.execution(admin_api, namespace=namespace, name="deleted")
        except client.ApiException as e:
            return e.status == 404
        return False

    await watching.eventually(gone, what="the execution to go", operator=process, timeout=60)
    reporter = store_.connect(settings.Settings(redis_url=redis_url))
    retained = json.loads(reporter.redis.hget(reporter.key(SLUG, "attempt-retained"), "deleted") or "null")
    reporter.redis.close()
    assert retained["final"]["state"] == "cancelled"
    assert [p["outcome"] for p in retained["removed"]["pods"]] == ["deleted"]
    assert "startup" not in retained["removed"]["pods"][0]  # A running worker is not refused.


# Among the slowest tests, each checkpoint: two operator starts (before and after the SIGKILL),
# the worker's 4 s run (it must be Running and handed before it fails, so final cleanup, not launch
# removal, takes it) and the cleanup pass after the restart.
@pytest.mark.parametrize(
    "checkpoint",
    ["after-journal-pin", "after-capture-save", "after-delete", "after-retained"],
)
async def test_sigkill_at_each_checkpoint_then_restart_gives_the_same_evidence(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    tmp_path: Path,
    checkpoint: str,
) -> None:
    proxy = threaded_fault_proxy
    kubeconfig = proxy.kubeconfig(token=control_plane.admin_token, path=tmp_path / "proxy.kubeconfig")
    pod = labels.worker_pod_name(execution="crash", generation=1)
    pod_path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    services = f"/api/v1/namespaces/{namespace}/services"
    # Each rule stops the operator's pass right after the checkpoint: its next request hangs.
    if checkpoint == "after-journal-pin":
        # Pinning lists pods and services and writes the journal; the capture's log read comes
        # next (the pin's list is the Pod's read for this pass). The services list is held a
        # moment so the test can make that log read hang (never forwarded to the API server).
        rule = proxy.delay(seconds=1.5, method="GET", path=services, query="labelSelector", times=1)
    elif checkpoint == "after-capture-save":
        rule = proxy.hang(method="DELETE", path=pod_path, times=None)  # Capture and "sent" saved; not sent.
    elif checkpoint == "after-delete":
        rule = proxy.delay(seconds=120, method="DELETE", path=pod_path, times=None, after_forward=True)
    else:
        rule = None  # Set once the launch's status is written: the next status PATCH is "Done".
    process = operator(kubeconfig=kubeconfig, namespace=namespace)
    connection = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        await start_failing_worker(
            admin_api, control_plane, namespace=namespace, execution="crash", run_for="4s"
        )
        if checkpoint == "after-journal-pin":
            await proxy.wait_for_count(method="GET", path=services, query="labelSelector", timeout=60)
            rule = proxy.hang(method="GET", path=pod_path + "/log", times=None)
        if checkpoint == "after-retained":

            async def quiet() -> bool:  # Launched: the hand wrote Running and what it waits for.
                status = await status_of(admin_api, namespace, "crash")
                return status.get("phase") == "Running" and bool(status.get("waitingFor"))

            await watching.eventually(quiet, what="the worker running", operator=process)
            rule = proxy.hang(method="PATCH", path=r".*/executions/crash/status", times=None)
        assert rule is not None

        async def reached() -> bool:
            journal = json.loads(await connection.hget(key("cleanup-journal"), "crash") or "null")
            retained = await connection.hget(key("attempt-retained"), "crash")
            if checkpoint == "after-journal-pin":
                return journal is not None and bool(rule.hits)
            if checkpoint == "after-capture-save":
                return (
                    journal is not None and bool(journal["pinned"]["pods"][0].get("sent")) and bool(rule.hits)
                )
            if checkpoint == "after-delete":
                return proxy.count(method="DELETE", path=pod_path) == 1 and not await watching.pod_exists(
                    admin_api, namespace=namespace, name=pod
                )
            return retained is not None and bool(rule.hits)

        await watching.eventually(reached, what=f"checkpoint {checkpoint}", operator=process, timeout=60)
        process.kill()
        proxy.remove_rule(rule)
        process.start()
        status = await wait_done(admin_api, namespace, "crash", process)
        retained = json.loads(await connection.hget(key("attempt-retained"), "crash") or "null")
    finally:
        await connection.aclose()
    [entry] = retained["removed"]["pods"]
    expected = "absent_after_send" if checkpoint == "after-delete" else "deleted"
    assert entry["outcome"] == expected
    assert status["cleanup"]["pods"] == {pod: expected}
    assert entry["startup"]["containers"][0]["log"].endswith(PLANTED.decode())
    hung = rule.hits if checkpoint == "after-journal-pin" else 0  # Those never reached the API server.
    assert proxy.count(path=pod_path + "/log") - hung == 1  # The log was read once, across the crash.
    deletes = proxy.count(method="DELETE", path=pod_path)
    # A delete hung before forwarding never reached the API server; the restart sends the only one.
    assert deletes == (2 if checkpoint == "after-capture-save" else 1)
    assert not await watching.pod_exists(admin_api, namespace=namespace, name=pod)


async def test_two_replicas_capture_and_delete_once(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    # Before `operator`, so the proxy outlives the replicas: a stopping replica clears its kopf
    # peering through it (with the proxy gone first, each retried for its whole 15 s stop timeout).
    threaded_fault_proxy: FaultProxy,
    operator: OperatorFactory,
    redis_url: str,
    tmp_path: Path,
) -> None:
    proxy = threaded_fault_proxy
    kubeconfig = proxy.kubeconfig(token=control_plane.admin_token, path=tmp_path / "proxy.kubeconfig")
    # As the chart runs them: two replicas, the Lease deciding which one steps the Executions.
    first = operator(kubeconfig=kubeconfig, namespace=namespace)
    second = operator(kubeconfig=kubeconfig, namespace=namespace)
    slug = "pair"
    executions = [f"pair-{i}" for i in range(4)]
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=78, reason="Error", run_for="1s")
    for execution in executions:
        await pods.plant_log(
            cluster=control_plane,
            namespace=namespace,
            pod=labels.worker_pod_name(execution=execution, generation=1),
            container="worker",
            content=PLANTED,
        )
    await watching.create(admin_api, builders.swarm(name=slug, namespace=namespace, annotations=behaviour))
    for execution in executions:
        await watching.create(admin_api, builders.execution(name=execution, namespace=namespace, swarm=slug))
    for execution in executions:
        await wait_done(admin_api, namespace, execution, first)
    assert second.running
    for execution in executions:
        pod_path = (
            f"/api/v1/namespaces/{namespace}/pods/{labels.worker_pod_name(execution=execution, generation=1)}"
        )
        assert proxy.count(method="POST", path=f"/api/v1/namespaces/{namespace}/pods") >= 1
        assert proxy.count(path=pod_path + "/log") == 1, execution
        assert proxy.count(method="DELETE", path=pod_path) == 1, execution
    assert proxy.count(method="POST", path=f"/api/v1/namespaces/{namespace}/pods") == len(executions)
    leaders = [p for p in (first, second) if "now holds the lease" in p.log()]
    assert len(leaders) == 1
    [standby] = [p for p in (first, second) if p not in leaders]
    # The standby watched (its view is ready for a takeover) and stepped nothing.
    assert "Listed" in standby.log() and "Cleanup of" not in standby.log()
    assert "Cleanup of" in leaders[0].log()
