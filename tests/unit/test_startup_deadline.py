"""The startup deadline's decision (finals.overdue): pure, on Pod dicts as the API server sends them."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import finals

CREATED = datetime.datetime(2026, 11, 30, 8, 0, 0, tzinfo=datetime.UTC)


def pod(
    *,
    phase: str = "Pending",
    node: str | None = "kwok-node",
    states: list[dict[str, Any]] | None = None,
    deadline: str | None = "60",
    start: str | None = "2026-11-30T08:00:00Z",
    active: int | None = None,
) -> dict[str, Any]:
    annotations = {} if deadline is None else {labels.STARTUP_DEADLINE: deadline}
    spec: dict[str, Any] = {"containers": [{"name": "worker"}]}
    if node:
        spec["nodeName"] = node
    if active is not None:
        spec["activeDeadlineSeconds"] = active
    status: dict[str, Any] = {"phase": phase}
    if start:
        status["startTime"] = start
    if states is not None:
        status["containerStatuses"] = [{"name": "worker", "state": s} for s in states]
    return {
        "metadata": {"name": "p", "creationTimestamp": "2026-11-30T08:00:00Z", "annotations": annotations},
        "spec": spec,
        "status": status,
    }


WAITING = [{"waiting": {"reason": "ImagePullBackOff"}}]
LATE = CREATED + datetime.timedelta(seconds=61)


@pytest.mark.parametrize(
    ("body", "at", "expected"),
    [
        (pod(states=WAITING), CREATED + datetime.timedelta(seconds=59), None),
        (
            pod(states=WAITING),
            LATE,
            finals.Overdue(deadline=60, scheduled=True, active_deadline=60, deadline_set=False),
        ),
        (pod(states=[{"running": {}}], phase="Running"), LATE, None),
        (pod(states=[{"terminated": {"exitCode": 1}}], phase="Running"), LATE, None),
        (pod(states=WAITING, phase="Failed"), LATE, None),
        (
            pod(states=WAITING, active=60),
            LATE,
            finals.Overdue(deadline=60, scheduled=True, active_deadline=60, deadline_set=True),
        ),
        (
            pod(states=WAITING, active=600),
            LATE,
            finals.Overdue(deadline=60, scheduled=True, active_deadline=60, deadline_set=False),
        ),
        # Scheduled 50 s after creation: the kubelet counts from startTime, so 10 s are left.
        (
            pod(states=WAITING, start="2026-11-30T08:00:50Z"),
            LATE,
            finals.Overdue(deadline=60, scheduled=True, active_deadline=10, deadline_set=False),
        ),
        (
            pod(states=WAITING, start="2026-11-30T08:05:00Z"),
            CREATED + datetime.timedelta(seconds=400),
            finals.Overdue(deadline=60, scheduled=True, active_deadline=1, deadline_set=False),
        ),
        (
            pod(node=None, states=None, start=None),
            LATE,
            finals.Overdue(deadline=60, scheduled=False, active_deadline=60, deadline_set=False),
        ),
        (pod(states=WAITING, deadline=None), LATE, None),  # The default (600 s) applies.
        (
            pod(states=WAITING, deadline="junk"),
            CREATED + datetime.timedelta(seconds=601),
            finals.Overdue(deadline=600, scheduled=True, active_deadline=600, deadline_set=False),
        ),
    ],
)
def test_overdue(body: dict[str, Any], at: datetime.datetime, expected: finals.Overdue | None) -> None:
    assert finals.overdue(body, default=600, at=at) == expected


def test_a_pod_with_two_containers_has_started_only_when_both_have() -> None:
    body = pod(states=[{"running": {}}])
    body["spec"]["containers"].append({"name": "sidecar"})
    assert not finals.started(body)
    body["status"]["containerStatuses"].append({"name": "sidecar", "state": {"running": {}}})
    assert finals.started(body)


def test_odd_pods_are_never_overdue() -> None:
    assert finals.overdue({}, default=1, at=LATE) is None
    assert finals.overdue({"metadata": {"creationTimestamp": "garbage"}}, default=1, at=LATE) is None
    deleting = pod(states=WAITING)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T08:00:30Z"
    assert finals.overdue(deleting, default=1, at=LATE) is None


@pytest.mark.parametrize(
    ("created", "annotation", "seconds", "expected"),
    [
        ("2026-11-30T08:00:00Z", "60", 59, True),
        ("2026-11-30T08:00:00Z", "60", 60, False),
        ("2026-11-30T08:00:00Z", None, 599, True),  # No annotation: the default (600).
        ("2026-11-30T08:00:00Z", "0", 601, False),  # Not a deadline: the default.
        ("2026-11-30T08:00:00Z", "soon", 599, True),
        ("", "60", 0, False),  # Creation unknown: never "within", so the caller reads the Pod.
        ("yesterday", "60", 0, False),
    ],
)
def test_within_deadline_is_what_overdue_judges_from_the_creation_time_and_annotation(
    created: str, annotation: str | None, seconds: int, expected: bool
) -> None:
    at = CREATED + datetime.timedelta(seconds=seconds)
    assert finals.within_deadline(created=created, annotation=annotation, default=600, at=at) is expected
    body = pod(states=WAITING, deadline=annotation)
    body["metadata"]["creationTimestamp"] = created
    # A Pod known to be within its deadline is never overdue; one past it (its creation known) is.
    overdue = finals.overdue(body, default=600, at=at)
    assert (overdue is None) is (expected or not created or created == "yesterday")
