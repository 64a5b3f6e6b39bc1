"""Evidence writes on a real redis-server: a stale writer fails instead of erasing.

Two steps (a pass and a delete, two replicas, a restart) may each have read an attempt's records
before the other wrote. These are the store's guarantees that make the loser's writes fail:
journal saves are compare-and-set on the entry's version, the first retain wins, a journal entry
is never created for an execution that is retained, a launch record keeps the first capture, and
an execution name's records belong to the Execution that claimed it first.
"""

from __future__ import annotations

import json

import pytest

from agentihooks_swarm import errors, records, store as store_
from agentihooks_swarm.storage import operations

SLUG = "writes"


def journal(execution: str = "e1", pods: int = 1) -> records.Journal:
    return records.Journal(
        execution=execution,
        generation=1,
        pinned=records.Objects(pods=[records.PinnedObject(name=f"p{i}", uid=f"u{i}") for i in range(pods)]),
    )


def capture(line: str) -> records.StartupCapture:
    return records.StartupCapture(
        phase="Failed",
        reason="",
        containers=[records.ContainerCapture(name="w", terminated={"exitCode": 3}, log=f"{line}\n")],
    )


def retained(execution: str, entries: list[records.RemovedObject]) -> records.Retained:
    return records.Retained(
        execution=execution,
        final=records.FinalRecord(
            execution=execution, generation=1, state=records.FinalState.FAILED, outcome="attempt-outcomes"
        ),
        watermark=0,
        archived=True,
        removed=records.RemovedObjects(pods=entries),
    )


async def stored_journal(store: operations.AsyncStore, execution: str = "e1") -> records.Journal | None:
    return await store.read_journal(slug=SLUG, execution=execution)


async def test_a_stale_journal_save_fails_and_keeps_the_newer_capture(store: operations.AsyncStore) -> None:
    pinned = await store.pin_journal(slug=SLUG, journal=journal())
    assert isinstance(pinned, records.Journal) and pinned.version == 1
    # Two steps read the same entry (version 1).
    first = records.Journal.model_validate(pinned.model_dump())
    second = records.Journal.model_validate(pinned.model_dump())
    first.pinned.pods[0].startup = capture("the capture")
    first.pinned.pods[0].sent = True
    await store.save_journal(slug=SLUG, journal=first)
    assert first.version == 2
    # The second, working from version 1, would erase the capture: it fails and writes nothing.
    second.pinned.pods[0].log_reads = 1
    with pytest.raises(errors.StaleWrite, match="changed by another write"):
        await store.save_journal(slug=SLUG, journal=second)
    assert second.version == 1
    kept = await stored_journal(store)
    assert kept is not None and kept.version == 2
    assert kept.pinned.pods[0].startup == capture("the capture") and kept.pinned.pods[0].log_reads is None
    # Read again, the second writer goes on from the stored entry.
    kept.pinned.pods[0].log_reads = 1
    await store.save_journal(slug=SLUG, journal=kept)
    assert kept.version == 3


async def test_a_journal_save_after_the_retain_fails_and_recreates_nothing(
    store: operations.AsyncStore,
) -> None:
    pinned = await store.pin_journal(slug=SLUG, journal=journal())
    assert isinstance(pinned, records.Journal)
    late = records.Journal.model_validate(pinned.model_dump())
    entry = records.RemovedObject(name="p0", uid="u0", outcome="deleted", startup=capture("kept"))
    assert await store.retain(slug=SLUG, retained=retained("e1", [entry]), journal_version=1) is not None
    assert await stored_journal(store) is None
    with pytest.raises(errors.StaleWrite, match="was removed"):
        await store.save_journal(slug=SLUG, journal=late)
    assert await stored_journal(store) is None  # The stale save did not bring the entry back.


async def test_the_first_retain_wins(store: operations.AsyncStore) -> None:
    await store.pin_journal(slug=SLUG, journal=journal())
    full = retained(
        "e1", [records.RemovedObject(name="p0", uid="u0", outcome="deleted", startup=capture("x"))]
    )
    assert await store.retain(slug=SLUG, retained=full, journal_version=1) == full
    # A stale step with nothing in its removed map: the stored record is returned, not replaced.
    empty = retained("e1", [])
    assert await store.retain(slug=SLUG, retained=empty, journal_version=1) == full
    raw = await store.redis.hget(store.key(SLUG, store_.RETAINED), "e1")
    assert raw is not None and json.loads(raw)["removed"]["pods"][0]["uid"] == "u0"


async def test_a_retain_from_a_stale_journal_fails(store: operations.AsyncStore) -> None:
    pinned = await store.pin_journal(slug=SLUG, journal=journal())
    assert isinstance(pinned, records.Journal)
    newer = records.Journal.model_validate(pinned.model_dump())
    newer.pinned.pods[0].startup = capture("after the read")
    await store.save_journal(slug=SLUG, journal=newer)
    with pytest.raises(errors.StaleWrite):
        await store.retain(slug=SLUG, retained=retained("e1", []), journal_version=1)
    assert await store.read_retained(slug=SLUG, execution="e1") is None
    assert await stored_journal(store) == newer


async def test_no_journal_entry_is_pinned_for_a_retained_execution(store: operations.AsyncStore) -> None:
    await store.pin_journal(slug=SLUG, journal=journal())
    done = retained("e1", [])
    await store.retain(slug=SLUG, retained=done, journal_version=1)
    # A step that read "no journal, not retained" before the retain pins late: it gets the record.
    assert await store.pin_journal(slug=SLUG, journal=journal()) == done
    assert await stored_journal(store) is None


async def test_a_retain_that_read_no_journal_entry_fails_once_one_exists(
    store: operations.AsyncStore,
) -> None:
    """A pass that pinned nothing writes no entry and retains with ``journal_version=None``: a
    pass that pinned something meanwhile wins, as its entry would have been found first."""
    pinned = await store.pin_journal(slug=SLUG, journal=journal())
    with pytest.raises(errors.StaleWrite):
        await store.retain(slug=SLUG, retained=retained("e1", []), journal_version=None)
    assert await store.read_retained(slug=SLUG, execution="e1") is None
    assert await stored_journal(store) == pinned
    # With no entry at all, the retain of an empty pass is stored and indexed.
    done = retained("e2", [])
    assert await store.retain(slug=SLUG, retained=done, journal_version=None) is done
    assert await store.read_retained(slug=SLUG, execution="e2") == done
    assert await store.redis.zscore(store.key(SLUG, store_.RETENTION_INDEX), "e2") is not None


async def test_a_retain_that_finds_the_record_removes_an_entry_left_beside_it(
    store: operations.AsyncStore,
) -> None:
    """A journal entry beside a retained record is what a retain that failed after its write left:
    the next retain of the execution (whatever version it read) returns the record and clears it."""
    done = retained("e1", [])
    await store.redis.hset(store.key(SLUG, store_.RETAINED), "e1", records.dump(done))
    await store.redis.hset(store.key(SLUG, store_.JOURNAL), "e1", records.dump(journal()))
    for version in (None, 1):
        assert await store.retain(slug=SLUG, retained=retained("e1", []), journal_version=version) == done
        assert await stored_journal(store) is None


async def test_an_earlier_journal_entry_is_returned_not_replaced(store: operations.AsyncStore) -> None:
    first = await store.pin_journal(slug=SLUG, journal=journal(pods=2))
    again = await store.pin_journal(slug=SLUG, journal=journal(pods=0))
    assert isinstance(again, records.Journal) and again == first and len(again.pinned.pods) == 2


async def test_an_entry_written_before_versions_existed_is_version_zero(store: operations.AsyncStore) -> None:
    legacy = journal()
    await store.redis.hset(store.key(SLUG, store_.JOURNAL), "e1", records.dump(legacy))
    read = await stored_journal(store)
    assert read is not None and read.version is None
    await store.save_journal(slug=SLUG, journal=read)
    assert read.version == 1
    with pytest.raises(errors.StaleWrite):
        await store.save_journal(slug=SLUG, journal=legacy)


async def test_the_launch_record_keeps_the_first_capture_and_names_it(store: operations.AsyncStore) -> None:
    first = records.StartupRecord(pod="w-1", uid="pod-a", labels={}, startup=capture("first"))
    second = records.StartupRecord(pod="w-1", uid="pod-b", labels={}, startup=capture("second"))
    assert await store.record_startup(slug=SLUG, execution="e1", record=first) == first
    assert await store.record_startup(slug=SLUG, execution="e1", record=second) == first
    assert await store.record_startup(slug=SLUG, execution="e1", record=first) == first


async def test_a_name_belongs_to_the_execution_that_claimed_it(store: operations.AsyncStore) -> None:
    mine = records.Owner(uid="uid-1", namespace="ns", at="2026-12-01T00:00:00Z")
    theirs = records.Owner(uid="uid-2", namespace="ns", at="2026-12-01T00:01:00Z")
    assert await store.claim(slug=SLUG, execution="e1", owner=mine) == mine
    assert await store.claim(slug=SLUG, execution="e1", owner=mine) == mine  # A retried launch.
    assert await store.claim(slug=SLUG, execution="e1", owner=theirs) == mine
    assert await store.owner(slug=SLUG, execution="e1") == mine
    # Records an older version wrote without an owner: nobody may claim the name.
    await store.redis.hset(store.key(SLUG, store_.RETAINED), "old", "{}")
    assert await store.claim(slug=SLUG, execution="old", owner=theirs) is None
    assert await store.owner(slug=SLUG, execution="old") is None


async def test_a_recorded_hand_is_found_only_for_the_execution_that_owns_the_name(
    store: operations.AsyncStore,
) -> None:
    mine = records.Owner(uid="uid-1", namespace="ns", at="2026-12-01T00:00:00Z")
    hand = records.HandResult(generation=1, handed=True, pod="w-1")
    assert await store.recorded_hand(slug=SLUG, execution="e1", uid="uid-1") is None  # Nothing yet.
    await store.claim(slug=SLUG, execution="e1", owner=mine)
    assert await store.recorded_hand(slug=SLUG, execution="e1", uid="uid-1") is None  # Claimed only.
    await store.save_hand(slug=SLUG, execution="e1", hand=hand)
    assert await store.recorded_hand(slug=SLUG, execution="e1", uid="uid-1") == hand
    # Another Execution under the name (its first is deleted, the records stay): not its hand.
    assert await store.recorded_hand(slug=SLUG, execution="e1", uid="uid-2") is None


async def test_forget_frees_a_name_but_not_while_cleanup_is_unfinished(
    store: operations.AsyncStore, redis_url: str
) -> None:
    from agentihooks_swarm import settings

    people = store_.connect(settings.Settings(redis_url=redis_url))
    mine = records.Owner(uid="uid-1", namespace="ns", at="2026-12-01T00:00:00Z")
    await store.claim(slug=SLUG, execution="e1", owner=mine)
    await store.pin_journal(slug=SLUG, journal=journal())
    assert people.forget(slug=SLUG, execution="e1") is None
    assert await store.owner(slug=SLUG, execution="e1") == mine
    await store.retain(slug=SLUG, retained=retained("e1", []), journal_version=1)
    assert people.forget(slug=SLUG, execution="e1") == 2  # The owner and the retained record.
    names = [*store_.RECORDS]
    found = [await store.redis.hexists(store.key(SLUG, name), "e1") for name in names]
    assert not any(found)
    assert await store.redis.zscore(store.key(SLUG, store_.RETENTION_INDEX), "e1") is None
    theirs = records.Owner(uid="uid-2", namespace="ns", at="2026-12-01T00:01:00Z")
    assert await store.claim(slug=SLUG, execution="e1", owner=theirs) == theirs
    await store.pin_journal(slug=SLUG, journal=journal())
    assert people.forget(slug=SLUG, execution="e1", force=True) == 2
    people.redis.close()


async def test_a_journal_entry_left_beside_the_retained_record_is_cleared(
    store: operations.AsyncStore,
) -> None:
    """A retain that failed after its write (a script keeps what it wrote before an error) leaves
    both; the entry goes, but never the entry of a cleanup in progress."""
    await store.pin_journal(slug=SLUG, journal=journal("in-progress"))
    assert await store.clear_journal(slug=SLUG, execution="in-progress") is False
    assert await stored_journal(store, "in-progress") is not None
    await store.pin_journal(slug=SLUG, journal=journal("left"))
    await store.redis.hset(store.key(SLUG, store_.RETAINED), "left", records.dump(retained("left", [])))
    assert await store.clear_journal(slug=SLUG, execution="left") is True
    assert await stored_journal(store, "left") is None
    assert await store.read_retained(slug=SLUG, execution="left") == retained("left", [])


async def test_no_write_for_a_forgotten_life_brings_its_records_back(
    store: operations.AsyncStore, redis_url: str
) -> None:
    """A deleted Execution's step still in flight when its user forgets its records: each of its
    writes refuses (``Forgotten``) and writes nothing, while a new life of the name (another UID),
    and a writer that names no life, still write."""
    from agentihooks_swarm import settings

    people = store_.connect(settings.Settings(redis_url=redis_url))
    old = records.Owner(uid="uid-old", namespace="ns", at="2026-12-01T00:00:00Z")
    assert await store.claim(slug=SLUG, execution="e1", owner=old) == old
    await store.save_hand(
        slug=SLUG,
        execution="e1",
        hand=records.HandResult(generation=1, handed=True, pod="w-1"),
        life="uid-old",
    )
    assert people.forget(slug=SLUG, execution="e1") == 2  # The owner claim and the hand.
    people.redis.close()

    late = records.StartupRecord(pod="w-1", uid="pod-a", labels={}, startup=capture("late"))
    hand = records.HandResult(
        generation=1, handed=False, reason=records.HandReason.PROJECT_UNPERMITTED, pod="w-1"
    )
    writes = {
        "claim": store.claim(slug=SLUG, execution="e1", owner=old, launched=True),
        "startup": store.record_startup(slug=SLUG, execution="e1", record=late, life=old.uid),
        "hand": store.save_hand(slug=SLUG, execution="e1", hand=hand, final=final("e1"), life=old.uid),
        "final": store.record_final(slug=SLUG, final=final("e1"), life=old.uid),
        "outcome": store.record_outcome(slug=SLUG, outcome=outcome("e1"), life=old.uid),
        "pin": store.pin_journal(slug=SLUG, journal=journal(), life=old.uid),
        "retain": store.retain(slug=SLUG, retained=retained("e1", []), journal_version=None, life=old.uid),
    }
    for write in writes.values():
        with pytest.raises(errors.Forgotten, match="uid-old"):
            await write
    found = {name: await store.redis.hexists(store.key(SLUG, name), "e1") for name in store_.RECORDS}
    assert not any(found.values()), found

    # The name applied again: its new life claims and writes as usual.
    new = records.Owner(uid="uid-new", namespace="ns", at="2026-12-01T00:05:00Z")
    assert await store.claim(slug=SLUG, execution="e1", owner=new) == new
    assert await store.record_startup(slug=SLUG, execution="e1", record=late, life=new.uid) == late
    assert await store.record_final(slug=SLUG, final=final("e1"), life=new.uid) == final("e1")
    pinned = await store.pin_journal(slug=SLUG, journal=journal(), life=new.uid)
    assert isinstance(pinned, records.Journal)
    kept = retained("e1", [])
    assert await store.retain(slug=SLUG, retained=kept, journal_version=pinned.version, life=new.uid) is kept
    # A writer that names no life is never refused.
    assert await store.record_outcome(slug=SLUG, outcome=outcome("e1")) == outcome("e1")


def final(execution: str) -> records.FinalRecord:
    return records.FinalRecord(
        execution=execution, generation=1, state=records.FinalState.REFUSED, transcript_end=0, outcome="o"
    )


def outcome(execution: str) -> records.Outcome:
    return records.Outcome(
        execution=execution, generation=1, success=False, summary="s", at="2026-12-01T00:00:00Z"
    )
