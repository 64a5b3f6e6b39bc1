"""The evidence kept for a restore after a failover, and the rules of the restore: pure parts."""

from __future__ import annotations

from agentihooks_swarm import failover, records


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def capture(line: str) -> records.StartupCapture:
    return records.StartupCapture(
        phase="Failed",
        reason="",
        containers=[records.ContainerCapture(name="w", terminated={"exitCode": 3}, log=f"{line}\n")],
    )


def retained(pods: list[records.RemovedObject], *, watermark: int = 0) -> str:
    return records.dump(
        records.Retained(
            execution="e1",
            final=records.FinalRecord(
                execution="e1", generation=1, state=records.FinalState.FAILED, outcome="attempt-outcomes"
            ),
            watermark=watermark,
            archived=True,
            removed=records.RemovedObjects(pods=pods),
        )
    )


def journal(version: int, pods: list[records.PinnedObject]) -> str:
    return records.dump(
        records.Journal(version=version, execution="e1", generation=1, pinned=records.Objects(pods=pods))
    )


def test_recent_keeps_the_latest_record_of_each_kind_and_execution() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(kind="journal", slug="s", execution="e1", raw="v1")
    recent.note(kind="journal", slug="s", execution="e1", raw="v2")
    recent.note(kind="startup", slug="s", execution="e1", raw="capture")
    assert [(w.kind, w.raw) for w in recent.entries()] == [("journal", "v2"), ("startup", "capture")]
    assert recent.bytes == len("v2") + len("capture")


def test_a_retained_record_ends_its_journal_entry() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(kind="journal", slug="s", execution="e1", raw="entry")
    recent.note(kind="journal", slug="s", execution="e2", raw="other")
    recent.note(kind="retained", slug="s", execution="e1", raw="done")
    assert [(w.kind, w.execution) for w in recent.entries()] == [("journal", "e2"), ("retained", "e1")]


def test_recent_forgets_by_age_and_by_bytes() -> None:
    clock = Clock()
    recent = failover.Recent(seconds=60, max_bytes=10, clock=clock)
    recent.note(kind="startup", slug="s", execution="old", raw="aaaa")
    clock.now += 61
    recent.note(kind="startup", slug="s", execution="a", raw="bbbb")
    assert [w.execution for w in recent.entries()] == ["a"]
    assert recent.dropped == 0  # Aged out: not counted as dropped.
    recent.note(kind="startup", slug="s", execution="b", raw="cccc")
    recent.note(kind="startup", slug="s", execution="c", raw="dddd")  # 12 bytes: the oldest goes.
    assert [w.execution for w in recent.entries()] == ["b", "c"]
    assert recent.dropped == 1 and recent.bytes == 8


def test_a_missing_record_is_written_and_a_stored_launch_capture_is_kept() -> None:
    assert failover.restored(kind="startup", stored=None, ours="x") == "x"
    assert failover.restored(kind="startup", stored="an earlier capture", ours="x") is None
    assert failover.restored(kind="retained", stored=None, ours="x") == "x"


def test_a_retained_record_gets_the_captures_it_lacks_and_keeps_the_rest() -> None:
    ours = retained(
        [records.RemovedObject(name="p1", uid="u1", outcome="deleted", startup=capture("the refusal"))]
    )
    # The new primary lacked ours; a step there found the Pod gone and retained it without a capture.
    stored = retained([records.RemovedObject(name="p1", uid="u1", outcome="absent")], watermark=7)
    merged = failover.restored(kind="retained", stored=stored, ours=ours)
    assert merged is not None
    record = records.load(records.Retained, merged)
    assert record.watermark == 7  # The stored record's own fields stay.
    [pod] = record.removed.pods
    assert pod.outcome == "absent" and pod.startup == capture("the refusal")
    assert failover.restored(kind="retained", stored=merged, ours=ours) is None  # Nothing lacks now.
    # A stored capture is never replaced by ours, and a Pod only ours saw is added.
    other = retained(
        [
            records.RemovedObject(name="p1", uid="u1", outcome="deleted", startup=capture("stored")),
            records.RemovedObject(name="p2", uid="u2", outcome="deleted", startup=capture("second")),
        ]
    )
    added = failover.restored(kind="retained", stored=retained([]), ours=other)
    assert added is not None
    assert [p.uid for p in records.load(records.Retained, added).removed.pods] == ["u1", "u2"]
    assert failover.restored(kind="retained", stored=other, ours=ours) is None


def test_an_older_journal_entry_is_replaced_and_a_newer_one_gets_the_captures_it_lacks() -> None:
    pod = records.PinnedObject(name="p1", uid="u1", sent=True, startup=capture("the refusal"))
    ours = journal(3, [pod])
    assert (
        failover.restored(
            kind="journal", stored=journal(2, [pod.model_copy(update={"startup": None})]), ours=ours
        )
        == ours
    )
    assert failover.restored(kind="journal", stored=ours, ours=ours) is None
    # A step on the new primary went past ours from an older entry: it keeps its own, one version
    # on (its next compare-and-set fails and it reads again), with our capture added.
    newer = journal(5, [records.PinnedObject(name="p1", uid="u1", sent=True)])
    merged = failover.restored(kind="journal", stored=newer, ours=ours)
    assert merged is not None
    entry = records.load(records.Journal, merged)
    assert entry.version == 6 and entry.pinned.pods[0].startup == capture("the refusal")


def test_an_older_stored_journal_entry_keeps_the_captures_it_took() -> None:
    # A step on the new primary captured p2 from an entry older than ours; ours captured p1.
    ours = journal(
        4,
        [
            records.PinnedObject(name="p1", uid="u1", startup=capture("first")),
            records.PinnedObject(name="p2", uid="u2"),
        ],
    )
    stored = journal(
        3,
        [
            records.PinnedObject(name="p1", uid="u1"),
            records.PinnedObject(name="p2", uid="u2", sent=True, startup=capture("second")),
        ],
    )
    merged = failover.restored(kind="journal", stored=stored, ours=ours)
    assert merged is not None
    entry = records.load(records.Journal, merged)
    assert entry.version == 4
    assert [p.startup for p in entry.pinned.pods] == [capture("first"), capture("second")]
