"""The failure class: one row per class (and per way to reach it), on captures as they are stored."""

from __future__ import annotations

from typing import Any

import pytest

from agentihooks_swarm import records
from agentihooks_swarm.capture import failures

C = records.FailureClass


def capture(
    *,
    phase: str = "Failed",
    reason: str = "",
    terminated: list[dict[str, Any]] | None = None,
    waiting: list[dict[str, Any]] | None = None,
    last: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    events: list[tuple[str, str, str]] | None = None,
) -> records.StartupCapture:
    return records.StartupCapture(
        phase=phase,
        reason=reason,
        containers=[
            records.ContainerCapture(name=f"c{i}", terminated=state)
            for i, state in enumerate(terminated or [])
        ],
        waiting=[
            records.WaitingContainer(name=f"w{i}", state={"waiting": state}, last_state=last)
            for i, state in enumerate(waiting or [])
        ]
        or None,
        conditions=conditions,
        events=[
            records.EventCapture(type=type_, reason=reason_, message=message, count=1)
            for type_, reason_, message in events or []
        ]
        or None,
    )


UNSCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
PULL_EVENT = ("Warning", "Failed", 'Failed to pull image "registry.invalid/x:1": not found')
SECRET_EVENT = ("Warning", "Failed", 'Error: secret "missing" not found')

ROWS: list[tuple[str, records.StartupCapture, records.FailureClass]] = [
    ("exit code", capture(terminated=[{"exitCode": 78, "reason": "Error"}]), C.EXIT_CODE),
    (
        "init exit code",
        capture(terminated=[{"exitCode": 3}], waiting=[{"reason": "PodInitializing"}]),
        C.EXIT_CODE,
    ),
    ("exit 0 then exit 1", capture(terminated=[{"exitCode": 0}, {"exitCode": 1}]), C.EXIT_CODE),
    ("signal by exit code", capture(terminated=[{"exitCode": 137, "reason": "Error"}]), C.SIGNAL),
    ("signal field", capture(terminated=[{"signal": 9}]), C.SIGNAL),
    ("oom", capture(terminated=[{"exitCode": 137, "reason": "OOMKilled"}]), C.OOM_KILLED),
    (
        "oom in lastState",
        capture(waiting=[{"reason": "X"}], last={"terminated": {"reason": "OOMKilled"}}),
        C.OOM_KILLED,
    ),
    (
        "deadline",
        capture(reason="DeadlineExceeded", terminated=[{"exitCode": 137, "reason": "Error"}]),
        C.DEADLINE_EXCEEDED,
    ),
    (
        "deadline, waiting on nothing known",
        capture(reason="DeadlineExceeded", waiting=[{"reason": "ContainerCreating"}]),
        C.DEADLINE_EXCEEDED,
    ),
    ("image pull", capture(reason="DeadlineExceeded", waiting=[{"reason": "ErrImagePull"}]), C.IMAGE_PULL),
    ("image backoff", capture(phase="Pending", waiting=[{"reason": "ImagePullBackOff"}]), C.IMAGE_PULL),
    ("invalid image name", capture(phase="Pending", waiting=[{"reason": "InvalidImageName"}]), C.IMAGE_PULL),
    (
        "pull failed, only the event left",
        capture(reason="DeadlineExceeded", events=[PULL_EVENT]),
        C.IMAGE_PULL,
    ),
    (
        "missing secret",
        capture(reason="DeadlineExceeded", waiting=[{"reason": "CreateContainerConfigError"}]),
        C.CONFIG_ERROR,
    ),
    (
        "create container error",
        capture(phase="Pending", waiting=[{"reason": "CreateContainerError"}]),
        C.CONFIG_ERROR,
    ),
    (
        "missing secret, only the event left",
        capture(reason="DeadlineExceeded", events=[SECRET_EVENT]),
        C.CONFIG_ERROR,
    ),
    (
        "mount",
        capture(
            reason="DeadlineExceeded",
            waiting=[{"reason": "ContainerCreating"}],
            events=[("Warning", "FailedMount", 'MountVolume.SetUp failed for volume "grant"')],
        ),
        C.MOUNT,
    ),
    ("unschedulable", capture(phase="Pending", conditions=[UNSCHEDULED]), C.UNSCHEDULABLE),
    ("unschedulable by reason", capture(phase="Pending", reason="Unschedulable"), C.UNSCHEDULABLE),
    ("evicted", capture(reason="Evicted", terminated=[{"exitCode": 137}]), C.EVICTED),
    ("nothing known", capture(phase="Failed"), C.UNKNOWN),
    ("terminated without exit code", capture(terminated=[{"reason": "Unknown"}]), C.UNKNOWN),
    (
        "a Normal pull event is not a failure",
        capture(events=[("Normal", "Pulling", "Pulling image")]),
        C.UNKNOWN,
    ),
]


@pytest.mark.parametrize(("capture_", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_classify(capture_: records.StartupCapture, expected: records.FailureClass) -> None:
    assert failures.classify(capture_) is expected


def test_every_class_has_a_row() -> None:
    assert {row[2] for row in ROWS} == set(records.FailureClass)


def test_class_is_stored_as_class() -> None:
    stored = capture(terminated=[{"exitCode": 78}])
    stored.failure_class = failures.classify(stored)
    dumped = records.dump(stored)
    assert '"class":"exit_code"' in dumped and "failure_class" not in dumped
    assert records.load(records.StartupCapture, dumped) == stored
