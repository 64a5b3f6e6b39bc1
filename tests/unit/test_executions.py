"""The pure parts of the Executions' table: what needs a step, what wakes one, when one expires,
the status a step writes, and ``run``'s namespace options."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from agentihooks_swarm import records, resources
from agentihooks_swarm.controller import executions
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import attempts, status
from agentihooks_swarm.lifecycle.model import Phase, Progress

KOPF = "kopf.zalando.org/KopfFinalizerMarker"


def execution(
    *,
    uid: str = "u1",
    phase: str | None = "Running",
    hand: bool = True,
    ttl: Any = None,
    finished_at: str | None = None,
    deleting: bool = False,
    finalizers: list[str] | None = None,
    version: str = "7",
    generation: int = 1,
    annotations: dict[str, str] | None = None,
    observed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "swarm.agentihooks.io/v1alpha1",
        "kind": "Execution",
        "metadata": {
            "name": "e-1",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": version,
            "generation": generation,
        },
        "spec": {"swarm": "demo", "project": "p", "task": {"big": "x" * 100}},
        "status": dict(observed or {}),
    }
    if phase is not None:
        body["status"]["phase"] = phase
    if hand:
        body["status"].update(
            {
                "attempt": 1,
                "pod": "swarm-worker-e-1-1",
                "hand": {"handed": True, "reason": None, "removed": None},
            }
        )
    if ttl is not None:
        body["spec"]["ttlSecondsAfterFinished"] = ttl
    if finished_at is not None:
        body["status"]["finishedAt"] = finished_at
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-11-30T08:00:00Z"
    if finalizers is not None:
        body["metadata"]["finalizers"] = finalizers
    if annotations is not None:
        body["metadata"]["annotations"] = annotations
    return body


def table() -> tuple[executions.Executions, list[str]]:
    woken: list[str] = []
    found = executions.Executions(
        expiry=executions.Expiry(default_ttl=None), wake=woken.append, legacy_finalizers=frozenset({KOPF})
    )
    return found, woken


def test_what_needs_a_step() -> None:
    found, woken = table()
    found.begin()
    for body in (
        execution(uid="running"),
        execution(uid="unlaunched", hand=False, phase=None),
        execution(uid="done", phase="Done"),
        execution(
            uid="invalid", phase="Invalid", hand=False, observed=status.observed(generation=1, relaunch=None)
        ),
        execution(uid="deleting", deleting=True, finalizers=[labels.FINALIZER]),
        execution(uid="deleting-kopfs", phase="Done", deleting=True, finalizers=[KOPF]),
        execution(uid="going", deleting=True, finalizers=["someone-elses"]),
        execution(uid="going-done", phase="Done", deleting=True, finalizers=["someone-elses"]),
    ):
        found.apply(None, body)
    found.end()
    # A launched Execution being deleted needs its cancel whoever holds it (the operator puts no
    # finalizer on: the worker Pod's evidence finalizer keeps its evidence); a Done one does not.
    assert sorted(t.uid for t in found) == ["deleting", "deleting-kopfs", "going", "running", "unlaunched"]
    assert sorted(woken) == sorted(t.uid for t in found)


def test_the_table_keeps_no_large_task_of_a_pending_execution() -> None:
    """A task may be 1 MB, and thousands of Executions may wait to launch (Pending, Blocked): the
    table keeps none of a large one; the step reads that spec at the launch."""
    found, _ = table()
    megabyte = "x" * 1_000_000
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for i in range(20):
            body = execution(uid=f"pending-{i}", phase=None, hand=False)
            body["spec"]["task"] = {"big": megabyte + str(i)}  # Each its own 1 MB, as a decoded body.
            found.apply("ADDED", body)
            del body
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(found) == 20
    assert after - before < 1_000_000, f"{(after - before) / 1e6:.1f} MB kept for 20 pending Executions"
    assert all(t.spec is None for t in found)


def test_a_small_spec_is_kept_until_its_launch() -> None:
    """The launch takes a small spec from the table instead of reading the Execution; a large one,
    a launched or a deleting Execution's is not kept."""
    pending = execution(phase=None, hand=False)
    small = executions.track(pending)
    assert small is not None and small.spec == pending["spec"]
    large = execution(phase=None, hand=False)
    large["spec"]["task"] = {"notes": "x" * executions.SPEC_KEPT}  # Valid, but over the budget.
    kept = executions.track(large)
    assert kept is not None and kept.spec_error is None and kept.spec is None
    deep = execution(phase=None, hand=False)
    deep["spec"]["task"] = {"steps": [{"n": i} for i in range(executions.SPEC_KEPT // 8)]}
    kept = executions.track(deep)
    assert kept is not None and kept.spec is None  # Many small values add up too.
    launched = executions.track(execution())
    assert launched is not None and launched.spec is None
    deleting = executions.track(
        execution(phase=None, hand=False, deleting=True, finalizers=[labels.FINALIZER])
    )
    assert deleting is not None and deleting.spec is None


def test_the_table_keeps_the_verdict_on_a_spec_that_cannot_launch() -> None:
    """An unlaunched Execution's spec is judged as the watch brings it, and only the verdict is kept:
    the step answers an invalid one (a task over resources.MAX_TASK_BYTES) without reading a 1 MB
    object again, which a loaded API server may not answer in time."""
    too_large = execution(phase=None, hand=False)
    too_large["spec"]["task"] = "x" * 1_000_001
    found = executions.track(too_large)
    assert found is not None and found.spec_error is not None
    assert found.spec_error == (
        f"Execution e-1: spec.task takes 1000003 bytes as JSON, more than the {resources.MAX_TASK_BYTES} "
        "its grant ConfigMap can hold; hand the worker a reference to the data instead"
    )
    unlaunched = executions.track(execution(phase=None, hand=False))
    assert unlaunched is not None and unlaunched.spec_error is None
    launched = executions.track(dict(too_large, status=execution()["status"]))  # Not judged again.
    assert launched is not None and launched.spec_error is None


def test_an_invalid_execution_needs_a_step_once_it_changed() -> None:
    seen = status.observed(generation=1, relaunch=None)
    base: dict[str, Any] = {"phase": "Invalid", "hand": False, "observed": seen}
    assert executions.track(execution(**base)) is None
    assert executions.track(execution(**base, generation=2)) is not None  # A new spec.
    assert executions.track(execution(**base, annotations={status.RELAUNCH_ANNOTATION: "s/2"})) is not None
    # From before the observed fields: only an annotation counts as a change.
    assert executions.track(execution(phase="Invalid", hand=False)) is None
    assert executions.track(
        execution(phase="Invalid", hand=False, annotations={status.RELAUNCH_ANNOTATION: "x"})
    )


def test_only_a_change_of_what_it_asks_for_wakes_a_step() -> None:
    found, woken = table()
    found.apply("ADDED", execution(version="1"))
    found.apply("MODIFIED", execution(version="2"))  # A status change (a step's own write).
    assert woken == ["u1"]
    found.apply("MODIFIED", execution(version="3", generation=2))
    found.apply(
        "MODIFIED", execution(version="4", generation=2, deleting=True, finalizers=[labels.FINALIZER])
    )
    assert woken == ["u1", "u1", "u1"]


def test_an_older_state_never_replaces_a_newer_one() -> None:
    found, _ = table()
    found.apply("MODIFIED", execution(version="10", deleting=True, finalizers=[labels.FINALIZER]))
    found.observe(uid="u1", kind="MODIFIED", body=execution(version="9"))  # A step's answer, late.
    tracked = found.get("u1")
    assert tracked is not None and tracked.deleting and tracked.resource_version == "10"


def test_an_execution_deleted_while_in_flight_keeps_its_cleanup() -> None:
    found, woken = table()
    found.apply("ADDED", execution(uid="a"))
    found.apply("ADDED", execution(uid="b", phase="Done"))
    found.apply("DELETED", execution(uid="a"))
    tracked = found.get("a")
    assert tracked is not None and tracked.gone and tracked.deleting
    assert woken == ["a", "a"]
    found.apply("DELETED", execution(uid="b", phase="Done"))
    assert found.get("b") is None


@pytest.mark.parametrize("holder", ["orphan", "foregroundDeletion"])
def test_an_execution_deleted_under_anothers_finalizer_is_stepped_at_once_and_kept_when_gone(
    holder: str,
) -> None:
    """A foreground or orphaning delete holds the Execution for a moment under the garbage
    collector's finalizer: its cancel starts then (it was forgotten there while the operator put
    its own finalizer on), and its DELETED still leaves the cleanup to do from memory."""
    found, woken = table()
    found.apply("ADDED", execution(version="1"))
    found.apply("MODIFIED", execution(version="2", deleting=True, finalizers=[holder]))
    tracked = found.get("u1")
    assert tracked is not None and tracked.deleting and not tracked.gone
    assert woken == ["u1", "u1"]
    found.apply("DELETED", execution(version="3", deleting=True))
    tracked = found.get("u1")
    assert tracked is not None and tracked.gone
    found.apply("ADDED", execution(uid="u2", version="4", phase="Done"))
    going = execution(uid="u2", version="5", phase="Done", deleting=True, finalizers=[holder])
    found.apply("MODIFIED", going)
    assert found.get("u2") is None  # Done: nothing left of it to do.


def test_a_list_drops_what_is_gone_and_done_leaves_the_table() -> None:
    found, _ = table()
    found.apply("ADDED", execution(uid="a"))
    found.apply("ADDED", execution(uid="b"))
    found.begin()
    found.apply(None, execution(uid="b", version="9"))
    found.end()
    assert found.get("a") is not None and found.get("a").gone  # type: ignore[union-attr]
    found.apply("MODIFIED", execution(uid="b", phase="Done", version="10"))
    assert found.get("b") is None


def test_a_deferred_step_is_left_out_of_the_resync() -> None:
    now = [100.0]
    found = executions.Executions(expiry=executions.Expiry(default_ttl=None), clock=lambda: now[0])
    found.apply("ADDED", execution(uid="a"))
    found.apply("ADDED", execution(uid="b"))
    found.defer("a", seconds=30)
    assert found.due() == ["b"]
    now[0] = 131.0
    assert sorted(found.due()) == ["a", "b"]


def test_the_tracked_status_is_a_copy_of_the_status_only() -> None:
    body = execution()
    body["status"]["kopf"] = {"progress": {}}
    tracked = executions.track(body)
    assert tracked is not None and "kopf" not in tracked.status
    body["status"]["phase"] = "Cleaning"
    assert tracked.status["phase"] == "Running"
    assert tracked.hand() == records.HandResult(generation=1, handed=True, pod="swarm-worker-e-1-1")
    assert set(tracked.reference()) == {"apiVersion", "kind", "name", "namespace", "uid"}
    assert (tracked.namespace, tracked.name, tracked.swarm, tracked.cancel, tracked.attempt_number) == (
        "ns",
        "e-1",
        "demo",
        False,
        1,
    )


def test_a_step_does_not_step_back_from_running_to_pending() -> None:
    out: dict[str, Any] = {}
    current = {"phase": "Running", "waitingFor": attempts.WORKER_RUNNING}
    status.progress(out, current, Progress(phase=Phase.PENDING, waiting_for=attempts.WORKER_RUNNING))
    assert out == {}  # Nothing changed: no PATCH.
    status.progress(out, current, Progress(phase=Phase.ARCHIVING, waiting_for="transcript"))
    assert out == {"phase": "Archiving", "waitingFor": "transcript"}


def test_done_writes_finished_at_once() -> None:
    retained = records.Retained(
        execution="e-1",
        final=records.FinalRecord(
            execution="e-1", generation=1, state=records.FinalState.FAILED, transcript_end=0, outcome="k"
        ),
        watermark=0,
        archived=True,
        removed=records.RemovedObjects(),
    )
    done = Progress(phase=Phase.DONE, outcome="failed", retained=retained)
    out: dict[str, Any] = {}
    status.progress(out, {"phase": "Running"}, done)
    assert set(out) == {"phase", "outcome", "finishedAt", "cleanup", "conditions"}
    again: dict[str, Any] = {}
    status.progress(again, {**out, "waitingFor": None}, done)
    assert again == {}


def test_expiry_counts_from_finished_at_with_the_spec_ttl_first() -> None:
    at = "2026-11-30T08:00:00Z"
    start = 1796025600.0  # 2026-11-30T08:00:00Z
    body = execution(phase="Done", finished_at=at, ttl=60)
    assert executions.expires_at(body, default_ttl=3600, now=0) == start + 60
    done = execution(phase="Done", finished_at=at)
    assert executions.expires_at(done, default_ttl=3600, now=0) == start + 3600
    assert (
        executions.expires_at(execution(phase="Done", finished_at=at, ttl=0), default_ttl=None, now=0)
        == start
    )
    assert executions.expires_at(done, default_ttl=None, now=0) is None
    assert executions.expires_at(execution(phase="Running", ttl=60), default_ttl=60, now=0) is None
    assert (
        executions.expires_at(execution(phase="Done", ttl=60, deleting=True), default_ttl=60, now=0) is None
    )
    # Done before finishedAt existed: from now.
    assert executions.expires_at(execution(phase="Done", ttl=60), default_ttl=None, now=100.0) == 160.0


def test_expiry_table_gives_each_due_execution_once() -> None:
    expiry = executions.Expiry(default_ttl=None)
    expiry.observe(event=None, body=execution(uid="late", phase="Done", ttl=100), now=0)
    expiry.observe(event=None, body=execution(uid="soon", phase="Done", ttl=10), now=0)
    expiry.observe(event=None, body=execution(uid="kept", phase="Done"), now=0)
    expiry.observe(event=None, body=execution(uid="gone", phase="Done", ttl=5), now=0)
    expiry.observe(event="DELETED", body=execution(uid="gone", phase="Done", ttl=5), now=0)
    assert len(expiry) == 2
    assert expiry.pop_due(now=50) == [("ns", "e-1", "soon")]
    assert expiry.pop_due(now=50) == []
    assert expiry.pop_due(now=100) == [("ns", "e-1", "late")]
    assert len(expiry) == 0
