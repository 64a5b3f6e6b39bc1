"""The evidence kept for a restore after a failover, and the rules of the restore: pure parts."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings, strategies as st

from agentihooks_swarm import records
from agentihooks_swarm.storage import failover
from tests.support import stored_records
from tests.support.clocks import Clock
from tests.support.stored_records import capture

A = records.dump(records.Owner(uid="uid-a", namespace="ns", at="2026-12-04T00:00:00Z"))
B = records.dump(records.Owner(uid="uid-b", namespace="ns", at="2026-12-04T01:00:00Z"))


def startup(line: str) -> str:
    return records.dump(records.StartupRecord(pod="p", uid="u", labels={}, startup=capture(line)))


def retained(pods: list[records.RemovedObject], *, watermark: int = 0) -> str:
    return records.dump(stored_records.retained(execution="e1", pods=pods, watermark=watermark))


def journal(
    version: int, pods: list[records.PinnedObject], removed: list[records.RemovedObject] | None = None
) -> str:
    return records.dump(
        stored_records.journal(execution="e1", version=version, pods=pods, removed=removed or [])
    )


def kept(recent: failover.Recent, kind: failover.Kind) -> str:
    [written] = [w for w in recent.entries() if w.kind == kind]
    return written.raw


# --- what a process keeps -------------------------------------------------------------------------


def test_recent_keeps_one_record_of_each_kind_and_execution_and_counts_bytes() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(kind="journal", slug="s", execution="e1", raw=journal(1, []), owner=A)
    recent.note(kind="journal", slug="s", execution="e1", raw=journal(2, []), owner=A)
    recent.note(kind="startup", slug="s", execution="e1", raw=startup("é"), owner=A)
    assert [(w.kind, w.uid) for w in recent.entries()] == [("journal", "uid-a"), ("startup", "uid-a")]
    assert records.load(records.Journal, kept(recent, "journal")).version == 2
    # Bytes, not characters: "é" is two.
    assert recent.bytes == sum(len(w.raw.encode()) + len(A.encode()) for w in recent.entries())
    assert recent.bytes > sum(len(w.raw) + len(A) for w in recent.entries())
    assert len(recent) == 2


def test_a_later_copy_with_fewer_captures_never_replaces_them() -> None:
    # The step saved the capture; after a failover it read the lagging journal, found the Pod gone
    # and saved it absent without the capture: what is kept holds both.
    recent = failover.Recent(clock=Clock())
    good = journal(2, [records.PinnedObject(name="p1", uid="u1", sent=True, startup=capture("refused"))])
    stale = journal(
        2,
        [records.PinnedObject(name="p1", uid="u1", sent=True)],
        [records.RemovedObject(name="p1", uid="u1", outcome="absent_after_send")],
    )
    recent.note(kind="journal", slug="s", execution="e1", raw=good, owner=A)
    recent.note(kind="journal", slug="s", execution="e1", raw=stale, owner=A)
    entry = records.load(records.Journal, kept(recent, "journal"))
    assert entry.pinned.pods[0].startup == capture("refused")
    assert entry.removed.pods[0].startup == capture("refused")
    assert entry.removed.pods[0].outcome == "absent_after_send"  # The later copy's progress stays.


def test_a_retain_takes_the_journals_captures_with_it_and_ends_the_entry() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(
        kind="journal",
        slug="s",
        execution="e1",
        raw=journal(3, [records.PinnedObject(name="p1", uid="u1", sent=True, startup=capture("refused"))]),
        owner=A,
    )
    recent.note(kind="journal", slug="s", execution="e2", raw=journal(1, []), owner=A)
    # The retain came from a re-pinned entry that found no Pod at all.
    recent.note(kind="retained", slug="s", execution="e1", raw=retained([]), owner=A)
    assert [(w.kind, w.execution) for w in recent.entries()] == [("journal", "e2"), ("retained", "e1")]
    [pod] = records.load(records.Retained, kept(recent, "retained")).removed.pods
    assert (pod.uid, pod.outcome, pod.startup) == ("u1", "absent_after_send", capture("refused"))


def test_a_new_life_replaces_what_an_earlier_one_wrote_under_the_name() -> None:
    recent = failover.Recent(clock=Clock())
    old = retained([records.RemovedObject(name="p1", uid="u1", outcome="deleted", startup=capture("old"))])
    recent.note(kind="retained", slug="s", execution="e1", raw=old, owner=A)
    new = retained([records.RemovedObject(name="p2", uid="u2", outcome="deleted")])
    recent.note(kind="retained", slug="s", execution="e1", raw=new, owner=B)
    [written] = recent.entries()
    assert written.uid == "uid-b" and written.raw == new


def test_a_launch_capture_kept_is_the_first() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(kind="startup", slug="s", execution="e1", raw=startup("first"), owner=A)
    recent.note(kind="startup", slug="s", execution="e1", raw=startup("second"), owner=A)
    assert kept(recent, "startup") == startup("first")


def test_recent_forgets_by_age_and_by_bytes_and_on_clear() -> None:
    clock = Clock()
    one = len(startup("x").encode())
    recent = failover.Recent(seconds=60, max_bytes=2 * one, clock=clock)
    recent.note(kind="startup", slug="s", execution="old", raw=startup("x"))
    clock.now += 61
    recent.note(kind="startup", slug="s", execution="a", raw=startup("x"))
    assert [w.execution for w in recent.entries()] == ["a"]
    assert recent.dropped == 0  # Aged out: not counted as dropped.
    recent.note(kind="startup", slug="s", execution="b", raw=startup("x"))
    recent.note(kind="startup", slug="s", execution="c", raw=startup("x"))  # Over the bound.
    assert [w.execution for w in recent.entries()] == ["b", "c"]
    assert recent.dropped == 1 and recent.bytes == 2 * one
    recent.clear()
    assert recent.entries() == [] and recent.bytes == 0


def test_a_record_this_version_cannot_read_is_kept_as_written() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(kind="journal", slug="s", execution="e1", raw="not json")
    recent.note(kind="retained", slug="s", execution="e1", raw="nor this")
    assert [(w.kind, w.raw) for w in recent.entries()] == [("retained", "nor this")]


def test_owner_uid_reads_the_claim() -> None:
    assert failover.owner_uid(A) == "uid-a"
    assert failover.owner_uid("") == ""
    assert failover.owner_uid("garbage") == ""


class Eager:
    """The rule :class:`failover.Recent` keeps, applied at each note: a copy of the same life is
    merged into what is kept at once (the retained record takes its journal's captures). The
    kept records are compared with Recent's, whose merges wait until a read."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], tuple[str, str]] = {}  # (kind, execution): (uid, raw)

    def note(self, *, kind: failover.Kind, execution: str, raw: str, owner: str) -> None:
        uid = failover.owner_uid(owner)
        earlier = self.items.pop((kind, execution), None)
        if earlier is not None and earlier[0] == uid:
            raw = failover.kept_union(kind=kind, newer=raw, older=earlier[1])
        if kind == "retained":
            journal = self.items.pop(("journal", execution), None)
            if journal is not None and journal[0] == uid:
                with contextlib.suppress(ValueError):
                    older = failover.journal_as_retained(journal[1], raw)
                    raw = failover.kept_union(kind="retained", newer=raw, older=older)
        self.items[(kind, execution)] = (uid, raw)


def _pinned(uid: str, line: str | None, sent: bool) -> records.PinnedObject:
    return records.PinnedObject(
        name=f"p-{uid}", uid=uid, sent=sent or None, startup=capture(line) if line else None
    )


_pods = st.lists(
    st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.none() | st.sampled_from(["a", "b"]), st.booleans()),
    max_size=3,
    unique_by=lambda t: t[0],
)
_notes = st.lists(
    st.tuples(
        st.sampled_from(["journal", "journal", "retained", "startup"]),
        st.sampled_from(["e1", "e2"]),
        st.sampled_from([A, A, B]),
        _pods,
        st.booleans(),  # Pinned Pods also removed.
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(notes=_notes, fold_at=st.integers(min_value=1, max_value=9))
def test_recent_keeps_what_a_merge_at_each_note_keeps(
    notes: list[tuple[failover.Kind, str, str, list[tuple[str, str | None, bool]], bool]], fold_at: int
) -> None:
    recent, eager = failover.Recent(clock=Clock()), Eager()
    for at, (kind, execution, owner, pods, removed) in enumerate(notes):
        pinned = [_pinned(uid, line, sent) for uid, line, sent in pods]
        gone = [
            records.RemovedObject(name=p.name, uid=p.uid, outcome="deleted", startup=p.startup)
            for p in pinned
            if removed
        ]
        if kind == "journal":
            raw = records.dump(
                stored_records.journal(execution=execution, version=at, pods=pinned, removed=gone)
            )
        elif kind == "retained":
            raw = records.dump(stored_records.retained(execution=execution, pods=gone))
        else:
            raw = records.dump(records.StartupRecord(pod="p", uid=str(at), labels={}, startup=capture("x")))
        recent.note(kind=kind, slug="s", execution=execution, raw=raw, owner=owner)
        eager.note(kind=kind, execution=execution, raw=raw, owner=owner)
        if at % fold_at == 0:  # Reads between notes fold what is pending.
            assert {(w.kind, w.execution): (w.uid, w.raw) for w in recent.entries()} == eager.items
    written = recent.entries()
    assert {(w.kind, w.execution): (w.uid, w.raw) for w in written} == eager.items
    assert recent.bytes == sum(len(w.raw.encode()) + len(w.owner.encode()) for w in written)


# --- the restore's merge: one test per rule -----------------------------------------------------


def test_a_missing_record_is_written_and_a_stored_launch_capture_is_kept() -> None:
    assert failover.restored(kind="startup", stored=None, ours="x") == "x"
    assert failover.restored(kind="startup", stored="an earlier capture", ours="x") is None
    assert failover.restored(kind="retained", stored=None, ours="x") == "x"
    assert failover.restored(kind="journal", stored=None, ours="x") == "x"


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


def test_pinned_gets_a_capture_ours_took_in_either_list() -> None:
    ours = journal(
        4,
        [records.PinnedObject(name="p1", uid="u1", sent=True)],
        [records.RemovedObject(name="p1", uid="u1", outcome="deleted", startup=capture("refused"))],
    )
    stored = journal(2, [records.PinnedObject(name="p1", uid="u1")])
    merged = failover.restored(kind="journal", stored=stored, ours=ours)
    assert merged is not None
    entry = records.load(records.Journal, merged)
    assert entry.pinned.pods[0].startup == capture("refused")
    assert entry.pinned.pods[0].sent is None  # The stored entry's own flags stay.


def test_removed_gets_a_capture_ours_took_while_it_was_pinned() -> None:
    # The restore of a journal used to copy a capture into pinned only, and the retain copies
    # removed: the capture was lost on the way.
    ours = journal(3, [records.PinnedObject(name="p1", uid="u1", sent=True, startup=capture("refused"))])
    stored = journal(
        5,
        [records.PinnedObject(name="p1", uid="u1", sent=True)],
        [records.RemovedObject(name="p1", uid="u1", outcome="absent_after_send")],
    )
    merged = failover.restored(kind="journal", stored=stored, ours=ours)
    assert merged is not None
    entry = records.load(records.Journal, merged)
    assert entry.pinned.pods[0].startup == capture("refused")
    assert entry.removed.pods[0].startup == capture("refused")
    assert entry.removed.pods[0].outcome == "absent_after_send"


def test_versions_from_two_histories_never_replace_the_stored_entry() -> None:
    # Ours has the higher version, but the stored entry was written by another writer after the
    # failover: its sent flags and outcomes stay, ours only adds what it lacks.
    ours = journal(
        9,
        [
            records.PinnedObject(name="p1", uid="u1", startup=capture("refused")),
            records.PinnedObject(name="p2", uid="u2"),
        ],
    )
    stored = journal(
        2,
        [
            records.PinnedObject(name="p1", uid="u1", sent=True),
            records.PinnedObject(name="p2", uid="u2", sent=True),
        ],
        [records.RemovedObject(name="p2", uid="u2", outcome="deleted")],
    )
    merged = failover.restored(kind="journal", stored=stored, ours=ours)
    assert merged is not None
    entry = records.load(records.Journal, merged)
    assert entry.version == 3  # One past the stored entry: a step that read it reads again.
    assert [(p.uid, p.sent) for p in entry.pinned.pods] == [("u1", True), ("u2", True)]
    assert entry.pinned.pods[0].startup == capture("refused")
    assert [(p.uid, p.outcome) for p in entry.removed.pods] == [("u2", "deleted")]
    # Nothing lacks: nothing to write, whatever the versions.
    assert failover.restored(kind="journal", stored=merged, ours=ours) is None


def test_objects_only_ours_lists_are_added() -> None:
    # The stored entry was pinned again after the Pod was gone: it lists nothing.
    ours = journal(
        3,
        [records.PinnedObject(name="p1", uid="u1", sent=True, startup=capture("refused"))],
        [records.RemovedObject(name="p1", uid="u1", outcome="deleted", startup=capture("refused"))],
    )
    merged = failover.restored(kind="journal", stored=journal(1, []), ours=ours)
    assert merged is not None
    entry = records.load(records.Journal, merged)
    assert [p.uid for p in entry.pinned.pods] == ["u1"] and [p.uid for p in entry.removed.pods] == ["u1"]
    assert entry.removed.pods[0].startup == capture("refused")


def test_a_journal_entry_becomes_what_a_retain_takes() -> None:
    entry = journal(
        4,
        [
            records.PinnedObject(name="p1", uid="u1", sent=True, startup=capture("one")),
            records.PinnedObject(name="p2", uid="u2", startup=capture("two")),
            records.PinnedObject(name="p3", uid="u3"),
        ],
        [records.RemovedObject(name="p1", uid="u1", outcome="deleted", startup=capture("one"))],
    )
    shape = retained([], watermark=5)
    record = records.load(records.Retained, failover.journal_as_retained(entry, shape))
    assert record.watermark == 5
    assert [(p.uid, p.outcome) for p in record.removed.pods] == [("u1", "deleted"), ("u2", "absent")]


def test_an_owner_claim_is_kept_and_put_back_only_where_there_is_none() -> None:
    recent = failover.Recent(clock=Clock())
    recent.note(kind="owner", slug="s", execution="e1", raw=A, owner=A)
    recent.note(kind="owner", slug="s", execution="e1", raw=A, owner=A)
    assert [(w.kind, w.uid) for w in recent.entries()] == [("owner", "uid-a")]
    assert failover.restored(kind="owner", stored=None, ours=A) == A
    assert failover.restored(kind="owner", stored=B, ours=A) is None
