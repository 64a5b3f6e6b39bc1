"""Evidence for workers that never start (issue 12), in-process against the real API server (through
the fault proxy) and the real Redis: waiting containers, the Pod's Events, log_error, the startup
deadline (activeDeadlineSeconds, UID-pinned) and a forbidden Events read."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import errors, records
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import attempts, cleanup, events, model
from tests.support import pods
from tests.support.fixtures_rig import Rig
from tests.support.planting import PLANTED, as_the_operator_makes_it, remove

pytestmark = pytest.mark.integration

WAITING_TO_START = 'container "worker" in pod "{pod}" is waiting to start: PodInitializing'


async def raw_pod(api: client.ApiClient, attempt: model.Attempt) -> dict[str, Any]:
    response: Any = await client.CoreV1Api(api).read_namespaced_pod(
        attempt.pod_name, attempt.namespace, _preload_content=False
    )
    found: dict[str, Any] = json.loads(await response.read())
    return found


async def waiting_pod(
    api: client.ApiClient, attempt: model.Attempt, *, reason: str, message: str, deadline: int | None = None
) -> dict[str, Any]:
    """A worker Pod whose container never starts (kwok's agentihooks-pod-wait Stage), once it waits."""
    annotations = pods.protocol_annotations(waiting_reason=reason, waiting_message=message)
    if deadline is not None:
        annotations[labels.STARTUP_DEADLINE] = str(deadline)
    body: Any = pods.worker_pod(
        name=attempt.pod_name,
        namespace=attempt.namespace,
        labels=attempt.labels,
        annotations=annotations,
        **as_the_operator_makes_it(attempt),
    )
    await client.CoreV1Api(api).create_namespaced_pod(attempt.namespace, body)
    for _ in range(300):
        found = await raw_pod(api, attempt)
        if (found.get("status") or {}).get("containerStatuses"):
            return found
        await asyncio.sleep(0.1)
    raise TimeoutError(f"pod {attempt.pod_name} never got its waiting container")


async def test_an_init_failure_captures_the_init_log_and_the_main_container_waiting(
    rig: Rig,
) -> None:
    """As on a real kubelet: init exits 3, the main container stays waiting (PodInitializing).
    Its log is never asked for (a kubelet answers 400 "waiting to start"), and the Pod goes."""
    attempt = await rig.attempt()
    await rig.plant_log(attempt, container="init", content=b"no creds\n")
    pod = await rig.plant(attempt, phase=None, log=None, init_exit_code=3)
    rig.proxy.reset_counts()
    async with rig.runtime() as runtime:
        assert (await remove(runtime, attempt, pod["metadata"]["uid"])).removed is True
        counted = runtime.metrics.startup_failures.labels("launch", "exit_code")._value.get()
    assert counted == 1
    assert rig.proxy.count(path=r".*/log$") == 1
    [read] = rig.proxy.matching_calls(path=r".*/log$")
    assert "container=init" in read.query
    record = await rig.startup(execution=attempt.execution)
    assert record is not None
    startup = record.startup
    assert [c.name for c in startup.containers] == ["init"]
    assert (startup.containers[0].log or "").endswith("no creds\n")
    assert startup.waiting is not None
    assert [(w.name, w.state) for w in startup.waiting] == [
        ("worker", {"waiting": {"reason": "PodInitializing"}})
    ]
    assert startup.conditions is not None
    assert {"type": "Initialized", "status": "False"}.items() <= next(
        c for c in startup.conditions if c["type"] == "Initialized"
    ).items()
    assert startup.failure_class == records.FailureClass.EXIT_CODE
    assert not await rig.exists(attempt)


async def never_ran(api: client.ApiClient, attempt: model.Attempt) -> dict[str, Any]:
    """The worker's terminated state as a kubelet reports a container that never ran (no
    ``startedAt``: ContainerStatusUnknown once the Pod failed); kwok wrote one that ran."""
    await client.CoreV1Api(api).patch_namespaced_pod_status(
        attempt.pod_name,
        attempt.namespace,
        [{"op": "remove", "path": "/status/containerStatuses/0/state/terminated/startedAt"}],
    )
    pod = await raw_pod(api, attempt)
    assert not pod["status"]["containerStatuses"][0]["state"]["terminated"].get("startedAt")
    return pod


def answer_waiting_to_start(rig: Rig, attempt: model.Attempt) -> None:
    """Every read of ``attempt``'s log answered as a kubelet answers for a container not started."""
    rig.proxy.fail(
        status=400,
        reason="BadRequest",
        message=WAITING_TO_START.format(pod=attempt.pod_name),
        path=r".*/log$",
        times=None,
    )


@pytest.mark.parametrize("path", ["launch", "cleanup"])
async def test_a_log_read_answering_waiting_to_start_for_a_container_that_never_ran_is_no_failure(
    rig: Rig,
    path: str,
) -> None:
    """The kubelet's 400 for a container that never ran: no log to lose, so the Pod is not kept
    (launch) and no log_reads are counted (cleanup); the entry says why it has no log."""
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    pod = await never_ran(rig.api, attempt)
    answer_waiting_to_start(rig, attempt)
    if path == "launch":
        assert (await rig.remove(attempt, pod)).removed is True
        found = await rig.startup(execution=attempt.execution)
        assert found is not None
        stored = json.loads(records.dump(found.startup))
    else:
        async with rig.runtime() as runtime:
            await rig.cleanup(runtime, attempt)
        [entry] = await rig.removed_pods(attempt)
        assert entry["outcome"] == "deleted" and "log_reads" not in entry
        stored = entry["startup"]
    [container] = stored["containers"]
    assert "log" not in container
    assert (container["log_error"]["cause"], container["log_error"]["status"]) == ("not_started", 400)
    assert not await rig.exists(attempt)


async def test_the_same_answer_for_a_container_that_ran_is_a_counted_failed_read(
    rig: Rig,
) -> None:
    """The words alone prove nothing: this container ran (it has a startedAt), so it had a log,
    and a read that did not bring it is a failed read: the Pod is kept."""
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    answer_waiting_to_start(rig, attempt)
    kept = await rig.remove(attempt, pod)
    assert kept.removed is False and "log could not be read" in kept.why
    async with rig.runtime() as runtime:
        with pytest.raises(cleanup.PassFailed, match="log_reads 1 of 3"):
            await rig.cleanup(runtime, attempt)
    assert await rig.startup(execution=attempt.execution) is None
    assert await rig.exists(attempt)


async def test_without_list_on_events_cleanup_removes_the_pod_with_no_events_field(rig: Rig) -> None:
    """Real RBAC without `list events`: one pass, the Pod deleted, the capture says events_error 403."""
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    kubeconfig = await rig.service_account(
        name="op",
        rules=[
            {
                "apiGroups": [""],
                "resources": ["pods", "services"],
                "verbs": ["get", "list", "delete", "patch"],
            },
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
    )
    async with rig.runtime(kubeconfig=kubeconfig) as runtime:
        await rig.cleanup(runtime, attempt)
        failures = runtime.metrics.events_read_failures.labels(path="cleanup", cause="refused")._value.get()
    [entry] = await rig.removed_pods(attempt)
    assert entry["outcome"] == "deleted" and "log_reads" not in entry
    startup = entry["startup"]
    assert "events" not in startup
    assert (startup["events_error"]["cause"], startup["events_error"]["status"]) == ("refused", 403)
    assert startup["containers"][0]["log"].endswith(PLANTED.decode())
    assert failures == 1


async def test_startup_deadline_sets_active_deadline_once_and_the_kubelet_fails_the_pod(
    rig: Rig,
) -> None:
    attempt = await rig.attempt()
    pod = await waiting_pod(
        rig.api,
        attempt,
        reason="ErrImagePull",
        message='failed to pull image "registry.invalid/x:1": not found',
        deadline=1,
    )
    await pods.post_event(
        rig.api,
        pod=pod,
        type_="Warning",
        reason="Failed",
        message='Failed to pull image "registry.invalid/x:1"',
    )
    hand = records.HandResult(generation=1, handed=True, pod=attempt.pod_name)
    notify = events.Collected()
    async with rig.runtime() as runtime:

        async def advance() -> model.Progress:
            return await attempts.advance(
                runtime=runtime,
                store=rig.store,
                guard=model.Unguarded(),
                attempt=attempt,
                hand=hand,
                cancelled=False,
                deadline_seconds=60,
                notify=notify,
            )

        rig.proxy.reset_counts()
        progress = await advance()
        for _ in range(50):  # The pass that finds the Pod past its deadline sets it and says so.
            if progress.reason == attempts.STARTUP_DEADLINE:
                break
            assert not progress.done and progress.outcome is None
            await asyncio.sleep(0.1)
            progress = await advance()
        assert progress.reason == attempts.STARTUP_DEADLINE
        assert progress.waiting_for == "the kubelet to fail the pod past its startup deadline"
        patches = rig.proxy.matching_calls(method="PATCH", path=r".*/pods/.*")
        assert len(patches) == 1
        await pods.wait_for_phase(rig.api, namespace=rig.namespace, name=attempt.pod_name, phase="Failed")
        failed = await raw_pod(rig.api, attempt)
        assert failed["spec"]["activeDeadlineSeconds"] >= 1
        assert failed["status"]["reason"] == "DeadlineExceeded"
        progress = await advance()
        for _ in range(5):
            if progress.done:
                break
            progress = await advance()
        set_count = runtime.metrics.startup_deadlines.labels(action="deadline_set")._value.get()
    assert progress.done and progress.failure_class == "image_pull"
    # The deadline, set once and never again; then cleanup's release of the evidence finalizer.
    assert rig.proxy.count(method="PATCH", path=r".*/pods/.*") == 2
    assert set_count == 1
    [entry] = await rig.removed_pods(attempt)
    startup = entry["startup"]
    assert (startup["phase"], startup["reason"], startup["class"]) == (
        "Failed",
        "DeadlineExceeded",
        "image_pull",
    )
    assert startup["containers"] == []  # No container terminated: the spec's field stays empty.
    assert startup["waiting"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    assert "Failed" in [e["reason"] for e in startup["events"]]
    reasons = [reason for _, reason, _ in notify.items]
    assert reasons.count(attempts.STARTUP_DEADLINE) == 1
    assert "AttemptFinal" in reasons and "CleanupFinished" in reasons
    assert not await rig.exists(attempt)


async def test_the_deadline_patch_is_pinned_to_the_uid(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await waiting_pod(rig.api, attempt, reason="ImagePullBackOff", message="back-off")
    async with rig.runtime() as runtime:
        with pytest.raises(errors.ApiRefused) as refused:
            await runtime.cluster.pods.set_active_deadline(
                namespace=rig.namespace, name=attempt.pod_name, uid="not-" + pod["metadata"]["uid"], seconds=5
            )
    assert refused.value.status == 422
    assert "activeDeadlineSeconds" not in (await raw_pod(rig.api, attempt))["spec"]
