"""The worker Pods' table: which change of a Pod wakes which Execution's step, and the
Executions' table's index by name that it wakes through."""

from __future__ import annotations

from typing import Any

import pytest

from agentihooks_swarm.controller import executions, worker_pods
from agentihooks_swarm.kubernetes import labels


def pod(
    *,
    name: str = "swarm-worker-e-1-1",
    execution: str | None = "e-1",
    uid: str = "p1",
    phase: str = "Running",
    state: str = "running",
    restarts: int = 0,
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid, "labels": {}}
    if execution is not None:
        metadata["labels"][labels.EXECUTION] = execution
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {
        "metadata": metadata,
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "worker", "state": {state: {}}, "restartCount": restarts}],
        },
    }


class Woken:
    def __init__(self, owners: dict[tuple[str, str], tuple[str, ...]]) -> None:
        self.owners = owners
        self.uids: list[str] = []

    def named(self, namespace: str, name: str) -> tuple[str, ...]:
        return self.owners.get((namespace, name), ())

    def table(self) -> worker_pods.WorkerPods:
        return worker_pods.WorkerPods(owners=self.named, wake=self.uids.append)


def listed(table: worker_pods.WorkerPods, *bodies: dict[str, Any]) -> None:
    table.begin()
    for body in bodies:
        table.apply(None, body)
    table.end()


def test_the_first_list_and_a_new_pod_from_the_watch_wake_nothing() -> None:
    woken = Woken({("ns", "e-1"): ("u1",), ("ns", "e-2"): ("u2",)})
    table = woken.table()
    listed(table, pod())
    table.apply("ADDED", pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2", phase="Pending"))
    assert woken.uids == [] and len(table) == 2


def test_a_change_of_what_a_step_judges_wakes_its_execution_and_a_status_detail_does_not() -> None:
    woken = Woken({("ns", "e-1"): ("u1",)})
    table = woken.table()
    listed(table, pod())
    table.apply("MODIFIED", pod())  # Conditions, IPs, …: nothing a step judges.
    assert woken.uids == []
    table.apply("MODIFIED", pod(state="terminated"))
    table.apply("MODIFIED", pod(state="terminated", phase="Failed"))
    table.apply("MODIFIED", pod(state="terminated", phase="Failed", deleting=True))
    table.apply("MODIFIED", pod(state="running", restarts=1, phase="Failed", deleting=True))
    assert woken.uids == ["u1"] * 4


def test_a_deleted_pod_wakes_every_execution_of_its_name_and_leaves_the_table() -> None:
    woken = Woken({("ns", "e-1"): ("old", "new")})
    table = woken.table()
    listed(table, pod())
    table.apply("DELETED", pod())
    assert woken.uids == ["old", "new"] and len(table) == 0


def test_a_relist_wakes_the_pods_that_changed_appeared_or_vanished_while_nobody_watched() -> None:
    woken = Woken(
        {("ns", "e-1"): ("u1",), ("ns", "e-2"): ("u2",), ("ns", "e-3"): ("u3",), ("ns", "e-4"): ("u4",)}
    )
    table = woken.table()
    listed(
        table,
        pod(),
        pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2"),
        pod(name="swarm-worker-e-3-1", execution="e-3", uid="p3"),
    )
    listed(
        table,
        pod(),  # unchanged
        pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2", phase="Failed", state="terminated"),
        pod(name="swarm-worker-e-4-1", execution="e-4", uid="p4"),  # new since
    )  # e-3's Pod is gone
    assert sorted(woken.uids) == ["u2", "u3", "u4"]
    assert len(table) == 3


def test_a_pod_without_the_execution_label_or_without_a_tracked_execution_wakes_nothing() -> None:
    woken = Woken({})
    table = woken.table()
    listed(table, pod(execution=None), pod(name="p", execution="untracked"))
    table.apply("MODIFIED", pod(name="p", execution="untracked", phase="Failed"))
    table.apply("DELETED", pod(name="p", execution="untracked"))
    assert woken.uids == [] and table.woken == 0 and len(table) == 0


def test_the_digest_holds_uid_phase_deletion_and_each_containers_state() -> None:
    assert worker_pods.digest(pod(state="waiting", phase="Pending")) == (
        "p1",
        "Pending",
        False,
        (("worker", "waiting", 0),),
    )
    assert worker_pods.digest({}) == ("", "", False, ())
    assert worker_pods.digest({"metadata": [], "status": {"containerStatuses": "x"}}) == ("", "", False, ())


def execution(uid: str, name: str, *, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
        "spec": {"swarm": "demo"},
        "status": {"phase": phase, "hand": {"handed": True}, "attempt": 1, "pod": f"swarm-worker-{name}-1"},
    }


def test_the_executions_table_names_each_tracked_execution_until_it_is_forgotten() -> None:
    table = executions.Executions(expiry=executions.Expiry(default_ttl=None))
    table.observe(uid="u1", kind="ADDED", body=execution("u1", "e-1"))
    table.observe(uid="u2", kind="ADDED", body=execution("u2", "e-1"))
    assert sorted(table.named("ns", "e-1")) == ["u1", "u2"]
    assert table.named("other", "e-1") == ()
    table.observe(
        uid="u1",
        kind="MODIFIED",
        body={
            **execution("u1", "e-1", phase="Done"),
            "metadata": {"name": "e-1", "namespace": "ns", "uid": "u1", "resourceVersion": "2"},
        },
    )
    assert table.named("ns", "e-1") == ("u2",)
    table.forget("u2")
    assert table.named("ns", "e-1") == ()


def test_the_pods_no_tracked_execution_names_are_unowned_with_their_attempt_labels() -> None:
    woken = Woken({("ns", "e-1"): ("u1",)})
    table = woken.table()
    orphan = pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2")
    orphan["metadata"]["labels"].update({labels.OWNER: labels.owner("demo"), labels.GENERATION: "1"})
    listed(table, pod(), orphan)
    [found] = table.unowned()
    assert (found.namespace, found.name, found.execution, found.generation) == (
        "ns",
        "swarm-worker-e-2-1",
        "e-2",
        "1",
    )
    assert labels.slug_of(found.owner) == "demo"


@pytest.mark.parametrize(
    ("value", "slug"),
    [(labels.owner("demo"), "demo"), (labels.owner(""), None), ("someone-else-demo", None), ("", None)],
)
def test_the_slug_of_an_owner_label_is_only_one_this_operator_sets(value: str, slug: str | None) -> None:
    assert labels.slug_of(value) == slug


def test_a_pod_that_may_have_ended_wakes_its_execution_for_its_evidence_first() -> None:
    woken = Woken({("ns", "e-1"): ("u1",), ("ns", "e-2"): ("u2",)})
    first: list[str] = []
    table = worker_pods.WorkerPods(owners=woken.named, wake=woken.uids.append, evidence=first.append)
    listed(
        table,
        pod(phase="Pending", state="waiting"),
        pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2"),
    )
    table.apply("MODIFIED", pod(phase="Running"))  # Started: bookkeeping, at the usual priority.
    table.apply("MODIFIED", pod(phase="Running", state="terminated"))  # A container ended.
    table.apply("MODIFIED", pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2", deleting=True))
    table.apply("DELETED", pod(phase="Running", state="terminated"))  # Gone: nothing left to read.
    assert (woken.uids, first) == (["u1", "u1"], ["u1", "u2"])
    table.begin()  # A relist finds a Pod that failed while nobody watched.
    table.apply(
        None, pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2", phase="Failed", deleting=True)
    )
    table.end()
    assert first == ["u1", "u2", "u2"]


def test_the_table_keeps_each_pods_creation_time_and_startup_deadline_for_the_step() -> None:
    table = Woken({}).table()
    table.synced(True)
    body = pod(phase="Pending", state="waiting")
    body["metadata"]["creationTimestamp"] = "2026-12-02T00:00:00Z"
    body["metadata"]["annotations"] = {labels.STARTUP_DEADLINE: "90", "other": "x"}
    listed(table, body, pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2"))
    found = table.seen(namespace="ns", name="swarm-worker-e-1-1").pod
    assert found is not None and (found.created, found.deadline) == ("2026-12-02T00:00:00Z", "90")
    bare = table.seen(namespace="ns", name="swarm-worker-e-2-1").pod
    assert bare is not None and (bare.created, bare.deadline) == ("", "")


def test_a_handed_workers_terminal_pod_is_kept_whole_and_handed_out_as_a_copy() -> None:
    handed = {("ns", "e-1")}
    table = worker_pods.WorkerPods(
        owners=lambda namespace, name: (), wake=lambda uid: None, handed=lambda ns, name: (ns, name) in handed
    )
    table.synced(True)
    running = pod()
    running["metadata"]["managedFields"] = [{"manager": "kwok"}]
    listed(table, running, pod(name="swarm-worker-e-2-1", execution="e-2", uid="p2", phase="Failed"))
    seen = table.seen(namespace="ns", name="swarm-worker-e-1-1").pod
    assert seen is not None and seen.terminal() is None  # Running: it may still change.
    refused = table.seen(namespace="ns", name="swarm-worker-e-2-1").pod
    assert refused is not None and refused.terminal() is None  # Not handed: launch removal reads it.

    failed = pod(state="terminated", phase="Failed")
    failed["metadata"]["managedFields"] = [{"manager": "kwok"}]
    table.apply("MODIFIED", failed)
    seen = table.seen(namespace="ns", name="swarm-worker-e-1-1").pod
    assert seen is not None
    copy = seen.terminal()
    assert copy is not None and "managedFields" not in copy["metadata"]
    assert copy["status"] == failed["status"] and copy["metadata"]["uid"] == "p1"
    copy["status"]["phase"] = "Running"  # A step's copy: the table's stays as watched.
    again = seen.terminal()
    assert again is not None and again["status"]["phase"] == "Failed"
    unwired = worker_pods.WorkerPods(owners=lambda namespace, name: (), wake=lambda uid: None)
    unwired.synced(True)
    listed(unwired, failed)  # No ``handed``: nothing is kept whole.
    kept = unwired.seen(namespace="ns", name="swarm-worker-e-1-1").pod
    assert kept is not None and kept.terminal() is None


def test_the_executions_table_says_whether_an_execution_of_a_name_handed_its_worker() -> None:
    table = executions.Executions(expiry=executions.Expiry(default_ttl=None))
    assert not table.handed("ns", "e-1")
    table.observe(uid="u1", kind="ADDED", body=execution("u1", "e-1"))
    assert table.handed("ns", "e-1") and not table.handed("other", "e-1")
    unhanded = execution("u2", "e-2")
    unhanded["status"]["hand"] = {"handed": False, "reason": "project_unpermitted"}
    table.observe(uid="u2", kind="ADDED", body=unhanded)
    assert not table.handed("ns", "e-2")
