"""When a cleanup pass waits for a pinned object someone else is deleting, and when that wait is
reported: pure judgement on the object's metadata and the time."""

from __future__ import annotations

import datetime

import pytest

from agentihooks_swarm.lifecycle import cleanup, finals

NOW = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=datetime.UTC)


def deleting(*, grace_ends_in: float, finalizers: list[str] | None = None) -> dict[str, object]:
    ends = NOW + datetime.timedelta(seconds=grace_ends_in)
    metadata: dict[str, object] = {"deletionTimestamp": ends.isoformat().replace("+00:00", "Z")}
    if finalizers is not None:
        metadata["finalizers"] = finalizers
    return metadata


@pytest.mark.parametrize("grace_ends_in", [30.0, 0.0, -finals.STOP_OVERDUE_AFTER])
def test_within_its_grace_period_and_the_slack_after_it_the_wait_is_quiet(grace_ends_in: float) -> None:
    waiting = cleanup.terminating(
        kind="pod", name="swarm-worker-e-1", metadata=deleting(grace_ends_in=grace_ends_in), now=NOW
    )
    assert not waiting.overdue
    assert str(waiting) == "pod swarm-worker-e-1 is being deleted, not by this cleanup; waiting for it to go"
    assert isinstance(waiting, cleanup.PassFailed)


def test_past_the_slack_the_wait_is_overdue_and_names_the_finalizers() -> None:
    waiting = cleanup.terminating(
        kind="pod",
        name="swarm-worker-e-1",
        metadata=deleting(grace_ends_in=-40.0, finalizers=["example.com/hold"]),
        now=NOW,
    )
    assert waiting.overdue
    assert "still there 40 s after its grace period ended" in str(waiting)
    assert "finalizers ['example.com/hold'] may hold it" in str(waiting)


def test_an_overdue_object_without_finalizers_points_at_its_node() -> None:
    waiting = cleanup.terminating(
        kind="service", name="swarm-terminal-e-1", metadata=deleting(grace_ends_in=-11.0), now=NOW
    )
    assert waiting.overdue and str(waiting).startswith("service swarm-terminal-e-1 is being deleted")
    assert "its node may not answer" in str(waiting)


def test_a_deletion_timestamp_that_is_not_a_time_is_reported_not_waited_for_quietly() -> None:
    waiting = cleanup.terminating(
        kind="pod", name="p", metadata={"deletionTimestamp": "soon", "finalizers": []}, now=NOW
    )
    assert waiting.overdue
    assert "still there after its grace period ended; its node may not answer" in str(waiting)
