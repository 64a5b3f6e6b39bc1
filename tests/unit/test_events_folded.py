"""An attempt's end told in one Event: a finished cleanup joins the note of how the attempt ended
when one step noted both (lifecycle/events.folded)."""

from __future__ import annotations

from agentihooks_swarm.lifecycle import events

CLEANED = "Attempt 1 cleaned up (swarm-worker-x-1: deleted (class exit_code))"


def test_a_refused_launch_and_its_cleanup_are_one_startup_refused_event() -> None:
    items = [
        (
            "Warning",
            "StartupRefused",
            "Worker pod swarm-worker-x-1: class exit_code: container worker exited 78",
        ),
        ("Normal", "CleanupFinished", CLEANED),
    ]
    assert events.folded(items) == [
        (
            "Warning",
            "StartupRefused",
            "Worker pod swarm-worker-x-1: class exit_code: container worker exited 78; "
            "attempt 1 cleaned up (swarm-worker-x-1: deleted (class exit_code))",
        )
    ]


def test_attempt_final_takes_the_cleanup_before_startup_refused_and_other_notes_stay() -> None:
    items = [
        ("Warning", "Unschedulable", "Worker pod swarm-worker-x-1 was not scheduled."),
        ("Normal", "AttemptFinal", "Attempt 1 is final: failed (Unschedulable)."),
        ("Warning", "LogsLost", "Pod swarm-worker-x-1: logs lost"),
        ("Normal", "CleanupFinished", CLEANED),
    ]
    assert events.folded(items) == [
        items[0],
        (
            "Normal",
            "AttemptFinal",
            "Attempt 1 is final: failed (Unschedulable); " + CLEANED[0].lower() + CLEANED[1:],
        ),
        items[2],
    ]


def test_a_cleanup_alone_or_an_ending_alone_is_its_own_event() -> None:
    alone = [("Normal", "CleanupFinished", CLEANED)]
    assert events.folded(alone) == alone
    ending = [("Normal", "AttemptFinal", "Attempt 1 is final: failed.")]
    assert events.folded(ending) == ending


def test_the_cleanup_is_kept_whole_and_the_ending_cut_when_the_two_are_too_long() -> None:
    line = "x" * 2000
    [(_, reason, message)] = events.folded(
        [("Warning", "StartupRefused", f"Worker pod p: {line}"), ("Normal", "CleanupFinished", CLEANED)]
    )
    assert reason == "StartupRefused"
    assert len(message) == events.MESSAGE_CHARACTERS
    assert message.endswith("...; " + CLEANED[0].lower() + CLEANED[1:])
    assert message.startswith("Worker pod p: xxx")
