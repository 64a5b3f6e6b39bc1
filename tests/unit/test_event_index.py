"""The Events index's table (pure): what it holds per Pod, what it drops, and that a capture made
from what it holds is the capture made from the API server's Events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentihooks_swarm import records
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import event_index
from tests.support.clocks import Clock


def event(
    uid: str,
    *,
    pod: str = "pod-a",
    reason: str = "BackOff",
    count: int = 1,
    message: str = "Back-off restarting failed container",
    version: str = "10",
    **more: Any,
) -> dict[str, Any]:
    """A core/v1 Event about a Pod, as the API server sends it (with the fields a capture ignores)."""
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": f"{pod}.{uid}",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": version,
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "managedFields": [{"manager": "kubelet", "operation": "Update"}],
        },
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "w", "uid": pod, "fieldPath": "x"},
        "reason": reason,
        "message": message,
        "source": {"component": "kubelet", "host": "node"},
        "firstTimestamp": "2026-11-30T08:00:00Z",
        "lastTimestamp": "2026-11-30T08:00:05Z",
        "count": count,
        "type": "Warning",
        "reportingComponent": "kubelet",
        "reportingInstance": "node",
        **more,
    }


def dumped(raw: list[dict[str, Any]]) -> list[Any]:
    return [json.loads(records.dump(e)) for e in diagnostics.fit_events(raw)]


@pytest.mark.parametrize(
    "raw",
    [
        event("e1", count=7),
        event("e2", message="x" * 5000),  # Longer than any capture keeps.
        # events.k8s.io-style (the scheduler's): eventTime and a series, no core timestamps.
        {
            **event("e3"),
            "firstTimestamp": None,
            "lastTimestamp": None,
            "count": None,
            "eventTime": "2026-11-30T08:00:01.123456Z",
            "series": {"count": 3, "lastObservedTime": "2026-11-30T08:00:09.000001Z"},
        },
        {**event("e4"), "message": None, "type": None, "count": "odd"},
    ],
)
def test_a_capture_of_slim_events_is_the_capture_of_the_events(raw: dict[str, Any]) -> None:
    assert dumped([event_index.slim(raw)]) == dumped([raw])
    assert "managedFields" not in json.dumps(event_index.slim(raw))
    assert len(json.dumps(event_index.slim(raw))) < 1400


def test_events_are_held_by_pod_uid_updated_in_place_and_removed_when_deleted() -> None:
    table = event_index.Table(clock=Clock())
    table.apply(kind=None, event=event("e1", pod="a"))
    table.apply(kind="ADDED", event=event("e2", pod="a", reason="Failed"))
    table.apply(kind="ADDED", event=event("e3", pod="b"))
    table.apply(kind="MODIFIED", event=event("e1", pod="a", count=5, version="12"))
    held = table.events("a")
    assert held is not None
    assert sorted((e["reason"], e["count"]) for e in held) == [("BackOff", 5), ("Failed", 1)]
    assert (len(table), table.pods) == (3, 2)
    assert table.events("never-seen") == []  # In sync and no Event of it: it has none.
    table.apply(kind="DELETED", event=event("e3", pod="b"))
    assert table.events("b") == []
    assert (len(table), table.pods) == (2, 1)


def test_an_event_without_a_pod_or_event_uid_is_ignored() -> None:
    table = event_index.Table(clock=Clock())
    no_pod = event("e1")
    no_pod["involvedObject"] = {"kind": "Pod", "name": "w"}
    no_uid = event("e2")
    del no_uid["metadata"]["uid"]
    for body in (no_pod, no_uid, {}, {"involvedObject": None, "metadata": "x"}):
        table.apply(kind="ADDED", event=body)
    assert len(table) == 0


def test_a_pod_unchanged_for_keep_seconds_is_dropped_and_then_read_from_the_api() -> None:
    clock = Clock()
    table = event_index.Table(keep_seconds=60, clock=clock)
    table.apply(kind="ADDED", event=event("e1", pod="old"))
    clock.now += 30
    table.apply(kind="ADDED", event=event("e2", pod="new"))
    clock.now += 31
    assert table.events("old") is None  # Dropped: the capture lists it.
    assert table.events("new") is not None
    table.apply(kind="ADDED", event=event("e3", pod="old"))  # A later Event does not make it whole.
    assert table.events("old") is None
    assert (len(table), table.pods) == (1, 1)


def test_beyond_max_events_the_least_recently_changed_pods_are_dropped() -> None:
    table = event_index.Table(max_events=4, clock=Clock())
    for pod, uids in (("p1", "ab"), ("p2", "cd")):
        for uid in uids:
            table.apply(kind="ADDED", event=event(f"{pod}{uid}", pod=pod))
    table.apply(kind="MODIFIED", event=event("p1a", pod="p1", count=2))  # p1 changed last: p2 goes.
    for uid in "ef":
        table.apply(kind="ADDED", event=event(f"p3{uid}", pod="p3"))
    assert len(table) == 4
    assert table.events("p2") is None
    assert [len(table.events(p) or []) for p in ("p1", "p3")] == [2, 2]
    table.apply(kind="ADDED", event=event("p2x", pod="p2"))  # A dropped Pod is not held again.
    assert table.events("p2") is None and len(table) == 4


def test_dropped_pods_are_remembered_boundedly_and_a_new_list_forgets_them() -> None:
    table = event_index.Table(max_events=1, max_dropped=2, clock=Clock())
    for pod in ("p1", "p2", "p3", "p4"):
        table.apply(kind="ADDED", event=event(f"e-{pod}", pod=pod))
    assert table.events("p2") is None and table.events("p3") is None
    # p1's UID fell out of the bounded memory: no Pod without held Events is answered any more.
    assert not table.whole
    assert table.events("p1") is None and table.events("never-seen") is None
    assert table.events("p4") is not None
    table.clear()
    assert table.whole and table.events("p2") == [] and len(table) == 0
