"""The order a resync (and a new leader's catch-up) queues steps in: a worker Pod whose evidence
waits first, then deletions, then the rest; the worker Pods' watch says which is which, and says
nothing while it is out of sync (controller/reconciler.urgency)."""

from __future__ import annotations

from typing import Any

from agentihooks_swarm import metrics
from agentihooks_swarm.controller import executions, reconciler, worker_pods
from agentihooks_swarm.controller.workqueue import KeyedQueue, Priority
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import model


def tracked(name: str, *, deleting: bool = False) -> model.Tracked:
    return model.Tracked(
        namespace="ns",
        name=name,
        uid=f"u-{name}",
        resource_version="1",
        spec_generation=1,
        swarm="s",
        cancel=False,
        deleting=deleting,
        status={"attempt": 1},
    )


def watch(*bodies: dict[str, Any]) -> worker_pods.WorkerPods:
    """The worker Pods' table after a list of ``bodies``, in sync."""
    table = worker_pods.WorkerPods(owners=lambda namespace, execution: (), wake=lambda uid: None)
    table.begin()
    for body in bodies:
        table.apply(None, body)
    table.end()
    table.synced(True)
    return table


def worker(
    execution: str, *, phase: str = "Running", state: str = "running", deleting: bool = False
) -> dict[str, Any]:
    """Execution ``execution``'s first worker Pod, as the watch lists it."""
    metadata: dict[str, Any] = {
        "name": labels.worker_pod_name(execution=execution, generation=1),
        "namespace": "ns",
        "uid": f"p-{execution}",
        "labels": {labels.EXECUTION: execution},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    return {
        "metadata": metadata,
        "status": {"phase": phase, "containerStatuses": [{"name": "worker", "state": {state: {}}}]},
    }


def test_evidence_waiting_comes_first_then_deletions_then_the_rest() -> None:
    workers = watch(
        worker("runs"),
        worker("failed", phase="Failed", state="terminated"),
        worker("exited", phase="Running", state="terminated"),
        worker("deleted-pod", deleting=True),
    )

    def of(item: model.Tracked) -> int:
        return reconciler.urgency(item, workers=workers)

    assert of(tracked("failed")) == of(tracked("exited")) == of(tracked("deleted-pod")) == 0
    assert of(tracked("gone", deleting=True)) == reconciler.URGENCY_DELETION
    assert of(tracked("runs")) == of(tracked("no-pod")) == reconciler.URGENCY_ROUTINE
    assert of(tracked("failed", deleting=True)) == reconciler.URGENCY_EVIDENCE


def test_a_watch_out_of_sync_says_nothing() -> None:
    workers = watch(worker("failed", phase="Failed", state="terminated"))
    workers.synced(False)
    assert reconciler.urgency(tracked("failed"), workers=workers) == reconciler.URGENCY_ROUTINE


def resync(workers: worker_pods.WorkerPods, queue: KeyedQueue[str], *tracked_: model.Tracked) -> None:
    """One resync over ``tracked_``, ordered by ``workers``, into ``queue`` (no step runs here)."""
    table = executions.Executions(expiry=executions.Expiry(default_ttl=None))
    for item in tracked_:
        table.adopt(item)
    steps: Any = None
    reconciler.Reconciler(
        lifecycle=steps,
        table=table,
        queue=queue,
        metrics=metrics.Metrics(),
        holds=lambda: True,
        interval=10,
        urgency=lambda item: reconciler.urgency(item, workers=workers),
    ).resync_now()


async def test_a_resync_queues_the_most_urgent_first() -> None:
    workers = watch(worker("failed", phase="Failed", state="terminated"), worker("runs"))
    queue: KeyedQueue[str] = KeyedQueue()
    resync(workers, queue, tracked("runs"), tracked("deleted", deleting=True), tracked("failed"))
    assert [await queue.get() for _ in range(3)] == ["u-failed", "u-deleted", "u-runs"]


async def test_a_resync_puts_waiting_evidence_ahead_of_what_a_watch_queued_before_it() -> None:
    """A new leader's catch-up, with a burst of new Executions already queued by the watch (NOW):
    the failed worker's step goes first, the routine ones after the burst."""
    workers = watch(worker("failed", phase="Failed", state="terminated"), worker("runs"))
    queue: KeyedQueue[str] = KeyedQueue()
    for uid in ("u-new-1", "u-new-2"):
        queue.add(uid, priority=Priority.NOW)
    resync(workers, queue, tracked("runs"), tracked("failed"))
    assert [await queue.get() for _ in range(4)] == ["u-failed", "u-new-1", "u-new-2", "u-runs"]
