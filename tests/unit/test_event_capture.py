"""The Events kept in a capture say who wrote them, are bounded field by field, and one Event over
the size budget is skipped, never the end of the list (``diagnostics.fit_events``, pure)."""

from __future__ import annotations

import json
from typing import Any

from agentihooks_swarm import records
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import event_index


def event(reason: str, minute: int, **more: Any) -> dict[str, Any]:
    """A kubelet's core/v1 Event about a Pod, last seen at 08:``minute``."""
    return {
        "type": "Warning",
        "reason": reason,
        "message": "m",
        "count": 1,
        "firstTimestamp": "2026-11-30T08:00:00Z",
        "lastTimestamp": f"2026-11-30T08:{minute:02d}:00Z",
        "source": {"component": "kubelet", "host": "node-1"},
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1",
        "metadata": {"resourceVersion": str(minute)},
        **more,
    }


def dumped(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(records.dump(e)) for e in diagnostics.fit_events(raw)]


def test_a_kept_event_says_who_wrote_it() -> None:
    [kept] = dumped([event("BackOff", 1)])
    assert kept == {
        "type": "Warning",
        "reason": "BackOff",
        "message": "m",
        "count": 1,
        "first_time": "2026-11-30T08:00:00Z",
        "last_time": "2026-11-30T08:01:00Z",
        "source": {"component": "kubelet", "host": "node-1"},
        "reporting_controller": "kubelet",
        "reporting_instance": "node-1",
    }


def test_a_forged_event_is_told_from_the_kubelets() -> None:
    """Anyone with ``events create`` can write about a Pod; the writer's name comes along."""
    forged = event("Failed", 2, source={"component": "mallory"}, reportingComponent="mallory")
    del forged["reportingInstance"]
    unsigned = event("Failed", 3, source=None, reportingComponent="")
    del unsigned["reportingInstance"]
    newest, older = dumped([forged, unsigned])
    assert (newest.get("source"), newest.get("reporting_controller")) == (None, None)
    assert (older["source"], older["reporting_controller"]) == ({"component": "mallory"}, "mallory")


def test_the_events_api_names_its_writer_reporting_controller() -> None:
    raw = {
        "type": "Normal",
        "reason": "Scheduled",
        "note": "assigned",
        "eventTime": "2026-11-30T08:00:00.000000Z",
        "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-host",
    }
    [kept] = dumped([raw])
    assert (kept["reporting_controller"], kept["reporting_instance"]) == (
        "default-scheduler",
        "default-scheduler-host",
    )
    assert "source" not in kept


def test_every_field_is_bounded() -> None:
    huge = "x" * 20 * 1024
    raw = event(
        huge,
        1,
        type=huge,
        message=huge,
        source={"component": huge, "host": huge},
        reportingComponent=huge,
        reportingInstance=huge,
        lastTimestamp=huge,
        firstTimestamp=huge,
    )
    [kept] = dumped([raw])
    limit = diagnostics.EVENT_FIELD_MAX
    words = [kept["type"], kept["reason"], kept["reporting_controller"], kept["reporting_instance"]]
    assert [len(w) for w in words] == [limit] * 4
    assert [len(kept["source"][k]) for k in ("component", "host")] == [limit] * 2
    assert (len(kept["first_time"]), len(kept["last_time"])) == (limit, limit)
    assert len(kept["message"]) == diagnostics.EVENT_MESSAGE_MAX
    # The index holds no more of it than a capture keeps.
    assert len(json.dumps(event_index.slim(raw))) < 4 * 1024
    assert dumped([event_index.slim(raw)]) == [kept]


def test_an_event_over_the_budget_is_skipped_and_the_others_kept() -> None:
    """Escaped control characters make bounded words six times their length in JSON: the newest
    Event is over the budget by itself, and the five real ones older than it are all kept."""
    noise = "\x01" * diagnostics.EVENT_FIELD_MAX
    large = event(noise, 9, type=noise, message="\x01" * diagnostics.EVENT_MESSAGE_MAX)
    assert diagnostics.fit_events([large]) == []  # Over the budget by itself: never kept.
    small = [event(f"Real{m}", m) for m in range(1, 6)]
    kept = dumped([*small, large])
    assert [e["reason"] for e in kept] == ["Real5", "Real4", "Real3", "Real2", "Real1"]
    assert len(json.dumps(kept, separators=(",", ":")).encode()) <= diagnostics.EVENTS_MAX_BYTES


def test_large_events_newest_first_are_skipped_while_smaller_older_ones_fit() -> None:
    large = [event(f"Large{m}", 50 + m, message="\x01" * diagnostics.EVENT_MESSAGE_MAX) for m in range(3)]
    small = [event(f"Real{m}", m) for m in range(1, 6)]
    kept = [e["reason"] for e in dumped([*large, *small])]
    assert kept[-5:] == ["Real5", "Real4", "Real3", "Real2", "Real1"]
    assert len(kept) <= diagnostics.EVENTS_MAX
