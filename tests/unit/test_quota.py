"""The pure parts of a swarm's byte quota: the setting, what a held-back Execution's status says,
and the sizes it says them in."""

from __future__ import annotations

import pytest

from agentihooks_swarm import settings
from agentihooks_swarm.lifecycle import status
from agentihooks_swarm.lifecycle.model import Phase


def test_the_quota_is_64_mib_by_default_0_turns_the_blocking_off_and_none_is_negative() -> None:
    assert settings.Settings().swarm_quota_bytes == 64 * 1024 * 1024
    assert settings.Settings.from_env({"AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES": "0"}).swarm_quota_bytes == 0
    with pytest.raises(settings.InvalidSettings, match="AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES='-1'"):
        settings.Settings.from_env({"AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES": "-1"})


def test_a_held_back_execution_is_blocked_and_told_the_bytes_the_bound_and_what_to_do() -> None:
    answer = status.quota_exceeded(swarm="ci", used=70_000_000, bound=64 * 1024 * 1024)
    assert answer.phase == Phase.BLOCKED
    [condition] = answer.conditions
    assert set(condition) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert (condition["type"], condition["status"]) == ("Launched", "False")
    assert condition["reason"] == "QuotaExceeded"
    message = condition["message"]
    assert "Swarm ci's keys take 66.8 MiB (70000000 bytes) in Redis" in message
    assert "its quota of 64.0 MiB (67108864 bytes)" in message
    assert "AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES" in message and "redis.swarmQuotaBytes" in message
    assert "`python -m agentihooks_swarm records forget ci NAME --requested-by YOUR_NAME`" in message
    assert "AGENTIHOOKS_SWARM_RETENTION_SECONDS" in message and "raise the quota" in message
    assert "Workers already running are captured" in message
    assert not answer.fields  # Nothing else of the status changes: it is not launched, nor Invalid.


def test_a_held_back_execution_is_noticed_once() -> None:
    held = status.quota_exceeded(swarm="ci", used=2, bound=1).conditions[0]
    assert status.launched_reason({"conditions": [dict(held)]}, status.QUOTA_EXCEEDED)
    launched = status.condition(type_="Launched", status=True, reason="Launched", message="Worker pod p")
    assert not status.launched_reason({"conditions": [launched]}, status.QUOTA_EXCEEDED)
    assert not status.launched_reason({"conditions": []}, status.QUOTA_EXCEEDED)
    assert not status.launched_reason({}, status.QUOTA_EXCEEDED)
    budget = status.condition(type_="Launched", status=False, reason="RefusalBudgetExceeded", message="m")
    assert not status.launched_reason({"conditions": [budget]}, status.QUOTA_EXCEEDED)


@pytest.mark.parametrize(
    ("count", "said"),
    [
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB (1024 bytes)"),
        (65_536 + 512, "64.5 KiB (66048 bytes)"),
        (64 * 1024 * 1024, "64.0 MiB (67108864 bytes)"),
        (3 * 1024**3, "3.0 GiB (3221225472 bytes)"),
    ],
)
def test_sizes_are_said_for_people_with_the_exact_count(count: int, said: str) -> None:
    assert status.size(count) == said
