"""The pure parts of the passes and of the Done Executions: what is tracked, when one expires, the
status a pass writes."""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentihooks_swarm import attempts, finished, passes, records, status


def execution(
    *,
    uid: str = "u1",
    phase: str | None = "Running",
    hand: bool = True,
    ttl: Any = None,
    finished_at: str | None = None,
    deleting: bool = False,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "swarm.agentihooks.io/v1alpha1",
        "kind": "Execution",
        "metadata": {"name": "e-1", "namespace": "ns", "uid": uid, "resourceVersion": "7"},
        "spec": {"swarm": "demo", "project": "p"},
        "status": {},
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
    return body


def test_only_launched_unfinished_executions_are_in_flight() -> None:
    table = passes.InFlight()
    table.observe(event=None, body=execution(uid="running"))
    table.observe(event=None, body=execution(uid="unlaunched", hand=False))
    table.observe(event=None, body=execution(uid="done", phase="Done"))
    table.observe(event=None, body=execution(uid="invalid", phase="Invalid"))
    table.observe(event=None, body=execution(uid="deleting", deleting=True))
    assert [t.uid for t in table] == ["running"]
    handled = execution(uid="handled")
    handled["status"]["kopf"] = {"last-handled-configuration": '{"spec":{}}'}
    table.observe(event=None, body=handled)
    assert "kopf" not in next(t for t in table if t.uid == "handled").status  # kopf's, not the pass's.
    table.observe(event="DELETED", body=handled)
    tracked = next(iter(table))
    assert (tracked.namespace, tracked.name, tracked.swarm, tracked.cancel, tracked.generation) == (
        "ns",
        "e-1",
        "demo",
        False,
        1,
    )
    assert tracked.hand() == records.HandResult(generation=1, handed=True, pod="swarm-worker-e-1-1")
    assert set(tracked.reference()) == {"apiVersion", "kind", "name", "namespace", "uid"}


def test_an_execution_leaves_the_table_when_done_or_deleted() -> None:
    table = passes.InFlight()
    table.observe(event=None, body=execution(uid="a"))
    table.observe(event=None, body=execution(uid="b"))
    table.observe(event="MODIFIED", body=execution(uid="a", phase="Done"))
    table.observe(event="DELETED", body=execution(uid="b"))
    assert len(table) == 0


def test_the_tracked_status_is_a_copy_of_the_status_only() -> None:
    body = execution()
    tracked = passes.track(body)
    assert tracked is not None
    body["status"]["phase"] = "Cleaning"
    assert tracked.status["phase"] == "Running"


def test_a_pass_does_not_step_back_from_running_to_pending() -> None:
    out: dict[str, Any] = {}
    current = {"phase": "Running", "waitingFor": attempts.WORKER_RUNNING}
    status.progress(out, current, attempts.Progress(phase="Pending", waiting_for=attempts.WORKER_RUNNING))
    assert out == {}  # Nothing changed: no PATCH.
    status.progress(out, current, attempts.Progress(phase="Archiving", waiting_for="transcript"))
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
    done = attempts.Progress(phase="Done", outcome="failed", retained=retained)
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
    assert finished.expires_at(body, default_ttl=3600, now=0) == start + 60
    assert (
        finished.expires_at(execution(phase="Done", finished_at=at), default_ttl=3600, now=0) == start + 3600
    )
    assert (
        finished.expires_at(execution(phase="Done", finished_at=at, ttl=0), default_ttl=None, now=0) == start
    )
    assert finished.expires_at(execution(phase="Done", finished_at=at), default_ttl=None, now=0) is None
    assert finished.expires_at(execution(phase="Running", ttl=60), default_ttl=60, now=0) is None
    assert finished.expires_at(execution(phase="Done", ttl=60, deleting=True), default_ttl=60, now=0) is None
    # Done before finishedAt existed: from now.
    assert finished.expires_at(execution(phase="Done", ttl=60), default_ttl=None, now=100.0) == 160.0


def test_expiry_table_gives_each_due_execution_once() -> None:
    table = finished.Expiry(default_ttl=None)
    table.observe(event=None, body=execution(uid="late", phase="Done", ttl=100), now=0)
    table.observe(event=None, body=execution(uid="soon", phase="Done", ttl=10), now=0)
    table.observe(event=None, body=execution(uid="kept", phase="Done"), now=0)
    table.observe(event=None, body=execution(uid="gone", phase="Done", ttl=5), now=0)
    table.observe(event="DELETED", body=execution(uid="gone", phase="Done", ttl=5), now=0)
    assert len(table) == 2
    assert table.pop_due(now=50) == [("ns", "e-1", "soon")]
    assert table.pop_due(now=50) == []
    assert table.pop_due(now=100) == [("ns", "e-1", "late")]
    assert len(table) == 0


def test_kopfs_finalizer_goes_only_from_a_done_execution_being_deleted() -> None:
    kopf = "kopf.zalando.org/KopfFinalizerMarker"
    deleting = execution(phase="Done", deleting=True, finalizers=[kopf, "other"])
    assert finished._released(deleting, finalizer=kopf) == ["other"]
    assert finished._released(execution(phase="Done", finalizers=[kopf]), finalizer=kopf) is None
    assert finished._released(execution(phase="Done", deleting=True, finalizers=[]), finalizer=kopf) is None
    # The watch sees Executions in flight too: their delete handler (kopf's) lets them go, not the watch.
    running = execution(phase="Running", deleting=True, finalizers=[kopf])
    assert finished._released(running, finalizer=kopf) is None
    invalid = execution(phase="Invalid", deleting=True, finalizers=[kopf])
    assert finished._released(invalid, finalizer=kopf) is None


def test_one_namespace_option_is_the_namespace_setting_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentihooks_swarm import __main__

    monkeypatch.delenv("AGENTIHOOKS_SWARM_NAMESPACE", raising=False)
    assert __main__._scope(["--namespace", "work", "--standalone"]) == ["--namespace", "work", "--standalone"]
    assert os.environ["AGENTIHOOKS_SWARM_NAMESPACE"] == "work"  # The Done watch serves what kopf serves.
    monkeypatch.setenv("AGENTIHOOKS_SWARM_NAMESPACE", "configured")
    assert __main__._scope(["--namespace=other"]) == ["--namespace=other"]
    assert os.environ["AGENTIHOOKS_SWARM_NAMESPACE"] == "configured"  # An explicit setting is kept.
    monkeypatch.delenv("AGENTIHOOKS_SWARM_NAMESPACE")
    assert __main__._scope(["-A"]) == ["-A"]
    assert "AGENTIHOOKS_SWARM_NAMESPACE" not in os.environ
