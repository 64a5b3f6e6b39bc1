"""A deleted worker Pod that its kubelet does not stop (finals.stopping): pure, on Pod dicts."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agentihooks_swarm.lifecycle import finals

NOW = datetime.datetime(2026, 12, 6, 12, 0, 0, tzinfo=datetime.UTC)


def pod(*, phase: str | None, deleting: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "swarm-worker-e1-1"}
    if deleting is not None:
        metadata["deletionTimestamp"] = deleting
    return {"metadata": metadata, "status": {} if phase is None else {"phase": phase}}


@pytest.mark.parametrize("phase", ["Running", "Pending", "Unknown", None])
@pytest.mark.parametrize(
    ("deleting", "left"),
    [
        ("2026-12-06T12:00:30Z", 40.0),  # Within its grace period: the kubelet is stopping it.
        ("2026-12-06T12:00:00Z", 10.0),
        ("2026-12-06T11:59:55Z", 5.0),
        ("2026-12-06T11:59:50Z", 0.0),  # Overdue from here on.
        ("2026-12-06T11:58:00Z", -110.0),
        ("not a time", 0.0),
    ],
)
def test_a_deleted_pod_not_ended_is_overdue_ten_seconds_after_its_grace_period(
    phase: str | None, deleting: str, left: float
) -> None:
    assert finals.STOP_OVERDUE_AFTER == 10.0
    assert finals.stopping(pod(phase=phase, deleting=deleting), at=NOW) == left


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_an_ended_pod_is_left_to_the_finality_check(phase: str) -> None:
    assert finals.stopping(pod(phase=phase, deleting="2026-12-06T11:00:00Z"), at=NOW) is None


def test_a_pod_not_being_deleted_is_not_stopping() -> None:
    assert finals.stopping(pod(phase="Running", deleting=None), at=NOW) is None
