"""Retention against the real redis-server: the leader's sweep over each swarm's retention index.

* Exact rules with a clock the test moves: a record younger than the retention is never removed,
  an unfinished cleanup (a journal entry) is never removed, nor is a still-running execution
  (no retained record); everything of a finished execution goes at once; the batch bound holds.
* A soak with the retention set to seconds: executions flow through the store's real write path
  (launch capture, hand, final, journal, retained move) while the sweep runs, and Redis
  ``used_memory`` stays flat although many times more evidence is written than is kept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from agentihooks_swarm import records, settings, store as store_
from agentihooks_swarm.controller import retention
from agentihooks_swarm.lifecycle import model
from agentihooks_swarm.storage import keys, operations
from tests.support.clocks import Clock

pytestmark = pytest.mark.integration

SLUG = "retention"


@pytest.fixture
async def clocked(redis_url: str) -> AsyncIterator[tuple[operations.AsyncStore, Clock]]:
    clock = Clock(now=1_000_000.0)
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    opened = operations.AsyncStore(client=client, prefix="agentihooks-swarm", clock=clock)
    try:
        yield opened, clock
    finally:
        await opened.aclose()


def _capture(log: str = "worker startup refused\n") -> records.StartupCapture:
    return records.StartupCapture(
        phase="Failed",
        reason="",
        containers=[
            records.ContainerCapture(name="worker", terminated={"exitCode": 78, "reason": "Error"}, log=log)
        ],
    )


async def _finish(
    store: operations.AsyncStore, execution: str, *, log: str = "x\n", retain: bool = True
) -> None:
    """One refused execution through the store's write path; ``retain=False`` leaves cleanup unfinished."""
    capture = _capture(log)
    owner = records.Owner(uid=f"execution-{execution}", namespace="ns", at="2026-12-01T00:00:00Z")
    await store.claim(slug=SLUG, execution=execution, owner=owner)
    record = records.StartupRecord(pod=f"pod-{execution}", uid=f"uid-{execution}", labels={}, startup=capture)
    await store.record_startup(slug=SLUG, execution=execution, record=record)
    hand = records.HandResult(
        generation=1, handed=False, reason=records.HandReason.PROJECT_UNPERMITTED, pod="p"
    )
    await store.save_hand(slug=SLUG, execution=execution, hand=hand)
    final = records.FinalRecord(
        execution=execution,
        generation=1,
        state=records.FinalState.REFUSED,
        outcome="attempt-outcomes",
        at="2026-11-30T00:00:00Z",
    )
    await store.record_final(slug=SLUG, final=final)
    pinned = records.PinnedObject(name=f"pod-{execution}", uid=f"uid-{execution}", sent=True, startup=capture)
    journal = records.Journal(execution=execution, generation=1, pinned=records.Objects(pods=[pinned]))
    await store.pin_journal(slug=SLUG, journal=journal)
    await store.save_journal(slug=SLUG, journal=journal)
    if not retain:
        return
    removed = records.RemovedObjects(
        pods=[records.RemovedObject(name=pinned.name, uid=pinned.uid, outcome="deleted", startup=capture)]
    )
    await store.retain(
        slug=SLUG,
        retained=records.Retained(
            execution=execution, final=final, watermark=0, archived=True, removed=removed
        ),
        journal_version=journal.version or 0,
    )


async def _fields(store: operations.AsyncStore, execution: str) -> set[str]:
    """The hashes that hold something for ``execution``."""
    names = [*keys.SWEPT, store_.JOURNAL]
    found = [await store.redis.hexists(store.key(SLUG, name), execution) for name in names]
    return {name for name, there in zip(names, found, strict=True) if there}


async def test_the_sweep_removes_only_finished_executions_older_than_the_retention(
    clocked: tuple[operations.AsyncStore, Clock],
) -> None:
    store, clock = clocked
    everything = {*keys.SWEPT} - {store_.HEARTBEATS, store_.OUTCOMES}  # The owner goes too.
    await _finish(store, "old")
    await _finish(store, "unfinished", retain=False)
    running = records.HandResult(generation=1, handed=True, pod="p")
    await store.save_hand(slug=SLUG, execution="running", hand=running)
    clock.now += 50
    await _finish(store, "young")
    assert await store.swarms() == [SLUG]

    clock.now += 60  # old: 110 s since its last write, young: 60 s; retention 100 s.
    swept = await retention.sweep(store=store, guard=model.Unguarded(), retention_seconds=100)
    assert (swept.removed, swept.kept, swept.swarms) == (1, 2, 1)
    assert await _fields(store, "old") == set()
    assert await _fields(store, "young") == everything
    assert await _fields(store, "unfinished") == {*everything, store_.JOURNAL} - {store_.RETAINED}
    assert await _fields(store, "running") == {store_.HANDS}

    clock.now += 1000  # Everything is old now; only the finished one goes.
    swept = await retention.sweep(store=store, guard=model.Unguarded(), retention_seconds=100)
    assert (swept.removed, swept.kept) == (1, 2)  # Looked at again (re-scored), kept again.
    assert await _fields(store, "young") == set()
    assert store_.JOURNAL in await _fields(store, "unfinished")
    assert await _fields(store, "running") == {store_.HANDS}


async def test_the_sweep_is_bounded_per_call(clocked: tuple[operations.AsyncStore, Clock]) -> None:
    store, clock = clocked
    for i in range(25):
        await _finish(store, f"e{i:02d}")
    clock.now += 200
    first = await store.sweep(slug=SLUG, retention_seconds=100, batch=10)
    assert (first.removed, first.kept) == (10, 0)
    assert await store.redis.zcard(store.key(SLUG, store_.RETENTION_INDEX)) == 15
    swept = await retention.sweep(store=store, guard=model.Unguarded(), retention_seconds=100, batch=10)
    assert swept.removed == 15
    assert await store.redis.zcard(store.key(SLUG, store_.RETENTION_INDEX)) == 0


# Among the slowest tests by design: a soak, `duration` seconds of writes, of which all after three
# retention periods must keep used_memory flat.
async def test_soak_with_retention_in_seconds_keeps_used_memory_flat(redis_url: str) -> None:
    retention_seconds, duration, rate = 2.0, 16.0, 25  # executions per second
    log = "worker startup refused: planted kind refusal " * 350  # ~16 KiB per capture, stored 3 times
    written = 0
    born: dict[str, float] = {}  # execution → time of its last write (when the retained move returned)
    young_removed: list[str] = []
    samples: list[tuple[float, int]] = []
    unfinished = [f"unfinished-{i}" for i in range(3)]
    async with operations.open_store(settings.Settings(redis_url=redis_url)) as store:
        for execution in unfinished:
            await _finish(store, execution, log=log, retain=False)
        baseline = int((await store.redis.info("memory"))["used_memory"])
        start = time.monotonic()
        sequence = 0
        while (elapsed := time.monotonic() - start) < duration:
            for _ in range(rate // 5):
                execution = f"e{sequence:05d}"
                sequence += 1
                before = time.time()
                await _finish(store, execution, log=log)
                born[execution] = before
                written += 3 * len(log)
            await retention.sweep(store=store, guard=model.Unguarded(), retention_seconds=retention_seconds)
            # The sweep's clock read came before this one, and each record's score after ``at``:
            # a record this young by the latest possible reading must still be there, however
            # long a loaded machine took over the sweep.
            swept_at = time.time()
            for execution, at in born.items():
                if swept_at - at < retention_seconds and not await store.redis.hexists(
                    store.key(SLUG, store_.RETAINED), execution
                ):
                    young_removed.append(execution)
            info = await store.redis.info("memory")
            samples.append((elapsed, int(info["used_memory"])))
            await asyncio.sleep(0.2)
        for execution in unfinished:
            assert await store.redis.hexists(store.key(SLUG, store_.JOURNAL), execution), execution

    assert young_removed == [], f"records younger than the retention were removed: {young_removed[:5]}"
    curve = ", ".join(f"{t:.0f}s {m / 2**20:.1f}" for t, m in samples[:: max(1, len(samples) // 16)])
    settled = [m for t, m in samples if t >= 3 * retention_seconds]
    print(
        f"soak: {sequence} executions, {written / 2**20:.1f} MiB of captures written, retention "
        f"{retention_seconds}s; used_memory MiB: {curve}; after {3 * retention_seconds:.0f}s "
        f"min {min(settled) / 2**20:.1f} max {max(settled) / 2**20:.1f} (before: {baseline / 2**20:.1f})"
    )
    assert written > 5 * (max(settled) - baseline), "the soak wrote too little to show anything"
    first_half = settled[: len(settled) // 2]
    second_half = settled[len(settled) // 2 :]
    assert max(second_half) <= 1.25 * max(first_half), "used_memory kept growing"
