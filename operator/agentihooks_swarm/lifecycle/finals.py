"""When an attempt is final, and what its cleanup waits for. Pure decisions, no I/O.

An attempt is final when its hand was refused, the Execution was cancelled or deleted, the worker
reported success, or its Pod reached Succeeded or Failed (or vanished after the hand). Its final
record is written once. Cleanup may start when the outcome is recorded and the transcript is
archived up to the final record's transcript end, or when the archive deadline has passed.

A worker Pod whose containers have not all started within its startup deadline is
:func:`overdue`: a scheduled one gets ``activeDeadlineSeconds`` so its kubelet fails it
(``DeadlineExceeded``) and it becomes final the Kubernetes way; one that was never scheduled has
no kubelet to fail it, so its attempt ends ``failed`` with the reason ``Unschedulable``.

A handed worker's Pod that someone else deletes (a user, an eviction) is stopped by its kubelet,
which then reports it ``Failed`` or ``Succeeded``, and it becomes final the usual way. One that is
still neither :data:`STOP_OVERDUE_AFTER` seconds after its grace period ended has no kubelet that
answers (a lost node): its attempt ends ``failed`` with the reason ``WorkerPodDeleted``
(:func:`stopping`), so that its Execution does not wait for good on a Pod that is on its way out.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Any, Final

from agentihooks_swarm import records
from agentihooks_swarm.kubernetes import labels

#: Seconds past the end of a deleted Pod's grace period after which a kubelet that has not
#: stopped it is taken not to answer. No setting.
STOP_OVERDUE_AFTER: Final = 10.0


def stopping(pod: dict[str, Any], *, at: datetime.datetime) -> float | None:
    """For a Pod being deleted that has not ended (Pending, Running, or Unknown: its node lost):
    the seconds until its kubelet is overdue to stop it (0 or less: overdue, see the module
    docstring); None for a Pod not being deleted or ended already. An unreadable deletion time
    counts as overdue."""
    metadata = _mapping(pod.get("metadata"))
    if not metadata.get("deletionTimestamp") or _mapping(pod.get("status")).get("phase") not in (
        None,
        "Pending",
        "Running",
        "Unknown",
    ):
        return None
    left = stop_due_in(metadata, at=at)
    return 0.0 if left is None else left


def stop_due_in(metadata: dict[str, Any], *, at: datetime.datetime) -> float | None:
    """Seconds until an object being deleted (its ``metadata``) is overdue to go:
    :data:`STOP_OVERDUE_AFTER` after its grace period ended (``deletionTimestamp``); 0 or less:
    overdue. None when that time cannot be read."""
    ends = _parse(metadata.get("deletionTimestamp"))
    return None if ends is None else STOP_OVERDUE_AFTER - (at - ends).total_seconds()


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def final_state(
    *,
    hand: records.HandResult,
    pod: dict[str, Any] | None,
    cancelled: bool,
    outcome: records.Outcome | None,
) -> records.FinalState | None:
    """The attempt's final state, or None while it is still going."""
    if not hand.handed:
        return records.FinalState.REFUSED
    if cancelled:
        return records.FinalState.CANCELLED
    if outcome is not None and outcome.success:
        return records.FinalState.COMPLETED
    if pod is None:
        return records.FinalState.FAILED
    phase = (pod.get("status") or {}).get("phase") if isinstance(pod.get("status"), dict) else None
    if phase == "Succeeded":
        return records.FinalState.COMPLETED
    if phase == "Failed":
        return records.FinalState.FAILED
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Readiness:
    """Whether cleanup may go ahead, and if not, what it waits for (for the Execution's status)."""

    ready: bool
    archived: bool
    watermark: int
    waiting_for: str = ""


def readiness(
    *,
    final: records.FinalRecord,
    heartbeat: records.Heartbeat | None,
    deadline_seconds: float,
    at: datetime.datetime,
) -> Readiness:
    watermark = heartbeat.archived if heartbeat is not None else 0
    if watermark >= final.transcript_end:
        return Readiness(ready=True, archived=True, watermark=watermark)
    started = _parse(final.at) or at
    remaining = deadline_seconds - (at - started).total_seconds()
    if remaining <= 0:
        return Readiness(ready=True, archived=False, watermark=watermark)
    return Readiness(
        ready=False,
        archived=False,
        watermark=watermark,
        waiting_for=(
            f"transcript archive: watermark {watermark} of {final.transcript_end}; "
            f"cleanup goes ahead without it in {int(remaining)}s"
        ),
    )


def _parse(value: Any) -> datetime.datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Overdue:
    """A worker Pod past its startup deadline, and what ends it."""

    #: The Pod's startup deadline in seconds.
    deadline: int
    #: False when the Pod has no node: no kubelet will ever fail it.
    scheduled: bool
    #: The ``activeDeadlineSeconds`` that makes its kubelet fail it now: counted by the kubelet
    #: from ``status.startTime``, so the time the Pod waited for a node is taken off (at least 1).
    active_deadline: int
    #: True when the Pod already has an ``activeDeadlineSeconds`` at most that: nothing to set.
    deadline_set: bool


def started(pod: dict[str, Any]) -> bool:
    """Whether every main container has started (is running or has terminated)."""
    spec = _mapping(pod.get("spec"))
    wanted = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]
    statuses = _mapping(pod.get("status")).get("containerStatuses")
    states = {
        item.get("name"): _mapping(item.get("state"))
        for item in (statuses if isinstance(statuses, list) else [])
        if isinstance(item, dict)
    }
    if not wanted:
        wanted = list(states)
    return bool(wanted) and all(
        "running" in states.get(name, {}) or "terminated" in states.get(name, {}) for name in wanted
    )


def startup_deadline(pod: dict[str, Any], *, default: int) -> int:
    """The Pod's startup deadline: its annotation (set at creation from the template), else ``default``."""
    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    return _deadline(annotations.get(labels.STARTUP_DEADLINE), default=default)


def _deadline(annotation: Any, *, default: int) -> int:
    try:
        value = int(str(annotation if annotation is not None else ""))
    except ValueError:
        return default
    return value if value > 0 else default


def within_deadline(*, created: Any, annotation: Any, default: int, at: datetime.datetime) -> bool:
    """Whether a Pod created at ``created`` (its ``creationTimestamp``), whose startup-deadline
    annotation is ``annotation``, is still within that deadline at ``at``; False when its creation
    time is unknown (so a caller that would act on a Pod past it reads the Pod instead)."""
    began = _parse(created)
    return began is not None and _within(began=began, deadline=_deadline(annotation, default=default), at=at)


def _within(*, began: datetime.datetime, deadline: int, at: datetime.datetime) -> bool:
    return (at - began).total_seconds() < deadline


def overdue(pod: dict[str, Any], *, default: int, at: datetime.datetime) -> Overdue | None:
    """The Pod past its startup deadline with containers not all started, or None."""
    status = _mapping(pod.get("status"))
    if status.get("phase") not in (None, "Pending", "Running") or started(pod):
        return None
    metadata = _mapping(pod.get("metadata"))
    created = _parse(metadata.get("creationTimestamp"))
    if created is None or metadata.get("deletionTimestamp"):
        return None
    deadline = startup_deadline(pod, default=default)
    if _within(began=created, deadline=deadline, at=at):
        return None
    spec = _mapping(pod.get("spec"))
    began = _parse(status.get("startTime")) or created
    active = max(1, math.ceil(deadline - (began - created).total_seconds()))
    current = spec.get("activeDeadlineSeconds")
    return Overdue(
        deadline=deadline,
        scheduled=bool(spec.get("nodeName")),
        active_deadline=active,
        deadline_set=isinstance(current, int) and current <= active,
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
