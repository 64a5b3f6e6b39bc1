"""The ``Synced`` condition (status.py): a step that failed before the attempt's cleanup keeps the
phase, and the condition turns back once a step gets through."""

from __future__ import annotations

from typing import Any

from agentihooks_swarm import errors
from agentihooks_swarm.lifecycle import status


def test_a_step_that_failed_before_cleanup_says_so_in_synced_and_leaves_the_phase() -> None:
    current: dict[str, Any] = {"phase": "Running", "conditions": [status.recorded()]}
    patch: dict[str, Any] = {}
    error = errors.StoreUnavailable("Redis is unavailable: Connection refused")
    status.set_condition(patch, current.get("conditions"), status.not_synced(error))
    assert set(patch) == {"conditions"}
    [recorded, synced] = patch["conditions"]
    assert recorded["type"] == "Recorded"
    assert set(synced) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert (synced["type"], synced["status"], synced["reason"]) == ("Synced", "False", "StoreUnavailable")
    assert synced["message"] == (
        "The last step could not read or record the attempt: Redis is unavailable: Connection refused; "
        "the next step retries."
    )


def test_synced_turns_true_only_over_an_earlier_false() -> None:
    never: dict[str, Any] = {}
    status.synced_again(never, {"phase": "Running", "conditions": [status.recorded()]})
    assert never == {}
    failed = status.not_synced(errors.ApiTimeout("read pod ns/p: no answer within 10s"))
    current: dict[str, Any] = {"phase": "Running", "conditions": [status.recorded(), failed]}
    patch: dict[str, Any] = {}
    status.synced_again(patch, current)
    [_, synced] = patch["conditions"]
    assert (synced["type"], synced["status"], synced["reason"]) == ("Synced", "True", "Synced")
    again: dict[str, Any] = {}
    status.synced_again(again, {**current, "conditions": patch["conditions"]})
    assert again == {}  # Unchanged: no write.
