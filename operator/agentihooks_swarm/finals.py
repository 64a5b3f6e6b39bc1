"""When an attempt is final, and what its cleanup waits for. Pure decisions, no I/O.

An attempt is final when its hand was refused, the Execution was cancelled or deleted, the worker
reported success, or its Pod reached Succeeded or Failed (or vanished after the hand). Its final
record is written once. Cleanup may start when the outcome is recorded and the transcript is
archived up to the final record's transcript end, or when the archive deadline has passed.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from agentihooks_swarm import records


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


def _parse(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
