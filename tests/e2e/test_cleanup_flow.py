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
from tests.support import pods, watching
from tests.support.failing_workers import SLUG, key, start_failing_worker
from tests.support.fixtures_scene import Scene
from tests.support.planting import PLANTED
from tests.support.proxy import FaultProxy


async def stored(scene: Scene, name: str, execution: str) -> Any:
    """The ``flow`` Swarm's record ``execution`` in Redis hash ``name``, or None."""
    return await scene.stored(slug=SLUG, name=name, execution=execution)


async def _deleting(scene: Scene, pod: str) -> bool:
    """Whether Pod ``pod`` is gone or has a deletionTimestamp."""
    try:
        found = await client.CoreV1Api(scene.api).read_namespaced_pod(pod, scene.namespace)
    except client.ApiException as e:
        if e.status == 404:
            return True
        raise
    return found.metadata.deletion_timestamp is not None


@pytest.mark.compat  # also on the oldest Kubernetes the chart allows (make test-compat)
async def test_worker_failing_after_the_hand_is_captured_by_final_cleanup(scene: Scene) -> None:
    process = scene.start()
    await start_failing_worker(scene, execution="fails-late")
    status = await scene.until_phase("fails-late", "Done", process=process)
    # A merge patch leaves out the null reason and removed; podUid is the worker Pod's.
    assert set(status["hand"]) == {"handed", "podUid", "terminal"} and status["hand"]["handed"] is True
    assert status["hand"]["terminal"] is False  # No terminal port: cleanup looks for no Service.
    assert status["outcome"] == "failed"
    pod = labels.worker_pod_name(execution="fails-late", generation=1)
    assert status["cleanup"]["pods"] == {pod: "deleted"}
    assert not await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod)

    retained = await stored(scene, "attempt-retained", "fails-late")
    assert await stored(scene, "cleanup-journal", "fails-late") is None
    final = await stored(scene, "attempt-finals", "fails-late")
    assert await stored(scene, "attempt-startup-diagnostics", "fails-late") is None
    assert (final["state"], final["transcript_end"]) == ("failed", 0)
    assert retained["final"] == final
    [entry] = retained["removed"]["pods"]
    assert entry["outcome"] == "deleted" and "log_reads" not in entry
    [container] = entry["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    assert container["log"].endswith(PLANTED.decode())
    found = await scene.events_once("fails-late", reasons={"Handed", "AttemptFinal"})
    # Final and cleaned up in one step: one Event says both (docs/concepts.md).
    [ended] = [m for _, r, m in found if r == "AttemptFinal"]
    assert (
        ended.startswith("Attempt 1 is final: failed; attempt 1 cleaned up (")
        and "(class exit_code)" in ended
    )
    assert "CleanupFinished" not in {r for _, r, _ in found}


def heartbeat(scene: Scene, *, execution: str, transcript: int, archived: int) -> None:
    """The worker of ``execution`` reports how much of its transcript it has and has archived."""
    reporter = store_.connect(settings.Settings(redis_url=scene.redis_url))
    try:
        worker.heartbeat(
            store=reporter,
            slug=SLUG,
            execution=execution,
            generation=1,
            transcript=transcript,
            archived=archived,
        )
    finally:
        reporter.redis.close()


async def test_cleanup_waits_for_the_transcript_archive(scene: Scene) -> None:
    process = scene.start()
    heartbeat(scene, execution="archives", transcript=100, archived=40)
    await start_failing_worker(scene, execution="archives")
    status = await scene.until_phase("archives", "Archiving", process=process)
    assert "watermark 40 of 100" in status["waitingFor"]
    pod = labels.worker_pod_name(execution="archives", generation=1)
    assert await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod)
    heartbeat(scene, execution="archives", transcript=100, archived=100)
    await scene.until_phase("archives", "Done", process=process)
    retained = await stored(scene, "attempt-retained", "archives")
    assert (retained["watermark"], retained["archived"], retained["final"]["transcript_end"]) == (
        100,
        True,
        100,
    )


async def test_archive_deadline_lets_cleanup_go_ahead_and_says_so(scene: Scene) -> None:
    process = scene.start(env={"AGENTIHOOKS_SWARM_ARCHIVE_DEADLINE_SECONDS": "2"})
    heartbeat(scene, execution="deadline", transcript=10, archived=0)
    await start_failing_worker(scene, execution="deadline")
    await scene.until_phase("deadline", "Done", process=process)
    retained = await stored(scene, "attempt-retained", "deadline")
    assert (retained["archived"], retained["watermark"]) == (False, 0)
    found = await scene.events_once("deadline", reasons={"CleanupFinished"}, process=process)
    messages = [m for _, r, m in found if r == "CleanupFinished"]
    assert messages and "archive deadline passed" in messages[0]


async def test_deleting_an_execution_cancels_and_cleans_up_its_attempt(scene: Scene) -> None:
    process = scene.start()
    await start_failing_worker(
        scene, execution="deleted", annotations=pods.protocol_annotations(phase="Running")
    )
    await scene.until_phase("deleted", "Running", process=process, timeout=30)
    await scene.delete("deleted")
    retained = await scene.until_cleaned_up("deleted", slug=SLUG, process=process)
    assert retained["final"]["state"] == "cancelled"
    # The garbage collector deletes the worker too (its owner is gone): whichever delete came
    # first, the evidence finalizer held the Pod until the operator had judged it (and released
    # it: then its pass finds it absent).
    [outcome] = [p["outcome"] for p in retained["removed"]["pods"]]
    assert outcome in ("deleted", "absent_after_send", "absent")
    assert "startup" not in retained["removed"]["pods"][0]  # A running worker is not refused.


# Among the slowest tests, each checkpoint: two operator starts (before and after the SIGKILL),
# the worker's 4 s run (it must be Running and handed before it fails, so final cleanup, not launch
# removal, takes it) and the cleanup pass after the restart.
@pytest.mark.parametrize(
    "checkpoint",
    ["after-journal-pin", "after-capture-save", "after-delete", "after-retained"],
)
async def test_sigkill_at_each_checkpoint_then_restart_gives_the_same_evidence(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene, checkpoint: str
) -> None:
    proxy, namespace = threaded_fault_proxy, scene.namespace
    pod = labels.worker_pod_name(execution="crash", generation=1)
    pod_path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    # Each rule stops the operator's pass right after the checkpoint: its next request hangs.
    if checkpoint == "after-journal-pin":
        # Pinning writes the journal (the attempt's Pod from the watch; no Services, as the
        # template has no terminal port); the capture's log read comes next, and is the first
        # log read of a handed worker: it hangs (never forwarded to the API server).
        rule = proxy.hang(method="GET", path=pod_path + "/log", times=None)
    elif checkpoint == "after-capture-save":
        rule = proxy.hang(method="DELETE", path=pod_path, times=None)  # Capture and "sent" saved; not sent.
    elif checkpoint == "after-delete":
        rule = proxy.delay(seconds=120, method="DELETE", path=pod_path, times=None, after_forward=True)
    else:
        rule = None  # Set once the launch's status is written: the next status PATCH is "Done".
    process = scene.start(kubeconfig=fault_proxy_kubeconfig)
    connection = redis.asyncio.Redis.from_url(scene.redis_url, decode_responses=True)
    try:
        await start_failing_worker(scene, execution="crash", run_for="4s")
        if checkpoint == "after-retained":

            async def quiet() -> bool:  # Launched: the hand wrote Running and what it waits for.
                status = await scene.status("crash")
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
            if checkpoint == "after-delete":  # Deleted, held by its evidence finalizer (or released).
                return proxy.count(method="DELETE", path=pod_path) == 1 and await _deleting(scene, pod)
            return retained is not None and bool(rule.hits)

        await watching.eventually(reached, what=f"checkpoint {checkpoint}", operator=process, timeout=60)
        process.kill()
        proxy.remove_rule(rule)
        process.start()
        status = await scene.until_phase("crash", "Done", process=process)
        retained = json.loads(await connection.hget(key("attempt-retained"), "crash") or "null")
    finally:
        await connection.aclose()
    [entry] = retained["removed"]["pods"]
    # After the delete, the Pod is held by its evidence finalizer until a pass releases it: the pass
    # after the restart finds its own delete under way, releases it and never sends it again.
    expected = "deleted"
    assert entry["outcome"] == expected
    assert status["cleanup"]["pods"] == {pod: expected}
    assert entry["startup"]["containers"][0]["log"].endswith(PLANTED.decode())
    hung = rule.hits if checkpoint == "after-journal-pin" else 0  # Those never reached the API server.
    assert proxy.count(path=pod_path + "/log") - hung == 1  # The log was read once, across the crash.
    deletes = proxy.count(method="DELETE", path=pod_path)
    # A delete hung before forwarding never reached the API server; the restart sends the only one.
    assert deletes == (2 if checkpoint == "after-capture-save" else 1)
    assert not await watching.pod_exists(scene.api, namespace=namespace, name=pod)


async def test_two_replicas_capture_and_delete_once(
    # Before `scene` (and its operator), so the proxy outlives the replicas: a stopping replica
    # clears its kopf peering through it (with the proxy gone first, each retried for its whole 15 s
    # stop timeout).
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
    scene: Scene,
) -> None:
    proxy, namespace = threaded_fault_proxy, scene.namespace
    # As the chart runs them: two replicas, the Lease deciding which one steps the Executions.
    first = scene.start(kubeconfig=fault_proxy_kubeconfig)
    second = scene.start(kubeconfig=fault_proxy_kubeconfig)
    slug = "pair"
    executions = [f"pair-{i}" for i in range(4)]
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=78, reason="Error", run_for="1s")
    for execution in executions:
        await pods.plant_log(
            cluster=scene.cluster,
            namespace=namespace,
            pod=labels.worker_pod_name(execution=execution, generation=1),
            container="worker",
            content=PLANTED,
        )
    await scene.swarm(name=slug, annotations=behaviour)
    for execution in executions:
        await scene.execution(name=execution, swarm=slug)
    for execution in executions:
        await scene.until_phase(execution, "Done", process=first)
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
