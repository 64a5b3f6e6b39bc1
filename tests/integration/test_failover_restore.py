"""Evidence a failover lost, put back by the operator that wrote it: a real Sentinel topology.

The soak found it (seed 20261201): records acknowledged by a replica were missing at the end, after
a burst of failovers promoted a replica that never had them. Here the same class of loss is made
deterministic. The replica's link is held back (its relay stops forwarding), the operator's store
writes a launch capture, a journal entry with a capture and a retained record (acknowledged by the
primary alone: ``REDIS_MIN_REPLICAS=0``, the one way to make an acknowledged write miss the
replica that is promoted every time), the primary is killed and Sentinel promotes the replica.

The first test reads the new primary and finds every record missing (the loss is real), and a
retained record a step wrote there without the capture. Then one look of the primary watch puts
each record back, the retained one with the capture added to what the step wrote. The others hold
the restore to what makes it safe (docs/redis.md): a stale step in the same process never costs
the capture; only the leader restores, each record once, and another writer's progress stays; a
forgotten or replaced life is never put back; a topology the watch cannot follow is said.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import redis

from agentihooks_swarm import errors, metrics, records, settings, store as store_
from agentihooks_swarm.storage import failover, operations
from tests.support.redis_cluster import ClusterTopology
from tests.support.redis_sentinel import SentinelTopology
from tests.support.redis_server import RedisServer
from tests.support.stored_records import capture, counted, journal, retained

pytestmark = pytest.mark.integration

SLUG = "failover"


def restored_count(collector: metrics.Metrics) -> dict[str, float]:
    return counted(collector, name="agentihooks_swarm_evidence_restored", label="record")


def owner(uid: str) -> records.Owner:
    return records.Owner(uid=uid, namespace="team", at="2026-12-04T00:00:00Z")


def primary_watch(store: operations.AsyncStore, collector: metrics.Metrics) -> failover.PrimaryWatch:
    """The watch of one operator replica, on its own store."""
    assert store.recent is not None
    return failover.PrimaryWatch(store=store, recent=store.recent, metrics=collector, interval=0.1)


async def until_answered(watch: failover.PrimaryWatch) -> int:
    """Look until the store's connections have found the new primary through Sentinel."""
    for _ in range(100):
        count = await watch.check()
        if count is not None:
            return count
        await asyncio.sleep(0.1)
    raise AssertionError("the watch never reached the new primary")


@contextlib.asynccontextmanager
async def watched_store(
    topology: SentinelTopology,
) -> AsyncIterator[tuple[operations.AsyncStore, metrics.Metrics, failover.PrimaryWatch]]:
    """One operator replica on ``topology``, its writes acknowledged by the primary alone
    (``REDIS_MIN_REPLICAS=0``): its store, its metrics and its primary watch, which has looked once
    at the primary as it is and found nothing to restore."""
    collector = metrics.Metrics()
    async with operations.open_store(topology.settings(redis_min_replicas=0), metrics=collector) as store:
        watch = primary_watch(store, collector)
        assert await watch.check() == 0
        yield store, collector, watch


async def test_records_a_failover_lost_are_put_back_by_their_writer(
    sentinel_topology: SentinelTopology,
) -> None:
    async with watched_store(sentinel_topology) as (store, collector, watch):
        sentinel_topology.relay.hold()  # From here the replica misses every write.
        launch = records.StartupRecord(pod="p1", uid="u1", labels={}, startup=capture("launch refusal"))
        await store.record_startup(slug=SLUG, execution="e1", record=launch)
        pinned = await store.pin_journal(
            slug=SLUG, journal=journal(execution="e2", pods=[records.PinnedObject(name="p2", uid="u2")])
        )
        assert isinstance(pinned, records.Journal)
        pinned.pinned.pods[0].startup = capture("cleanup refusal")
        pinned.pinned.pods[0].sent = True
        await store.save_journal(slug=SLUG, journal=pinned)
        await store.pin_journal(
            slug=SLUG, journal=journal(execution="e3", pods=[records.PinnedObject(name="p3", uid="u3")])
        )
        ours = retained(
            execution="e3",
            pods=[
                records.RemovedObject(
                    name="p3", uid="u3", outcome="deleted", startup=capture("retained refusal")
                )
            ],
        )
        await store.retain(slug=SLUG, retained=ours, journal_version=1)
        assert store.recent is not None
        assert {w.kind for w in store.recent.entries()} == {"startup", "journal", "retained"}

        old = await asyncio.to_thread(sentinel_topology.kill_primary)
        new = await asyncio.to_thread(sentinel_topology.wait_promoted, old=old)
        direct = redis.Redis(port=new.port, decode_responses=True)
        # The loss is real: the promoted replica has none of the three.
        assert direct.hget(store.key(SLUG, store_.STARTUP_DIAGNOSTICS), "e1") is None
        assert direct.hget(store.key(SLUG, store_.JOURNAL), "e2") is None
        assert direct.hget(store.key(SLUG, store_.RETAINED), "e3") is None
        # A step on the new primary found e3's Pod gone and retained it without the capture.
        theirs = retained(
            execution="e3", pods=[records.RemovedObject(name="p3", uid="u3", outcome="absent")], watermark=9
        )
        direct.hset(store.key(SLUG, store_.RETAINED), "e3", records.dump(theirs))

        assert await until_answered(watch) == 3  # The store's connections find the new primary.
        assert await watch.check() == 0  # Once: the same primary again restores nothing.

        assert await store.read_startup(slug=SLUG, execution="e1") == launch
        back = await store.read_journal(slug=SLUG, execution="e2")
        assert back is not None and back.pinned.pods[0].startup == capture("cleanup refusal")
        kept = await store.read_retained(slug=SLUG, execution="e3")
        assert kept is not None and kept.watermark == 9  # What the step wrote stays...
        assert kept.removed.pods[0].outcome == "absent"
        assert kept.removed.pods[0].startup == capture("retained refusal")  # ...with the capture back.
        assert direct.hget(store.key(SLUG, store_.JOURNAL), "e3") is None
        assert restored_count(collector) == {"startup": 1.0, "journal": 1.0, "retained": 1.0}
        direct.close()


async def test_a_stale_step_after_a_failover_never_costs_the_capture(
    sentinel_topology: SentinelTopology,
) -> None:
    """The step that wrote the capture, retried on the lagging new primary, finds its Pod gone and
    retains it without the capture, through the same process: the capture still comes back."""
    async with watched_store(sentinel_topology) as (store, collector, watch):
        assert await store.claim(slug=SLUG, execution="e1", owner=owner("uid-1")) == owner("uid-1")
        pinned = await store.pin_journal(
            slug=SLUG, journal=journal(execution="e1", pods=[records.PinnedObject(name="p1", uid="u1")])
        )
        assert isinstance(pinned, records.Journal)
        await asyncio.to_thread(sentinel_topology.wait_in_sync)  # The replica has the pin, not what follows.

        sentinel_topology.relay.hold()
        pinned.pinned.pods[0].startup = capture("the refusal")
        pinned.pinned.pods[0].sent = True
        await store.save_journal(slug=SLUG, journal=pinned)  # Acknowledged by the primary alone.
        old = await asyncio.to_thread(sentinel_topology.kill_primary)
        await asyncio.to_thread(sentinel_topology.wait_promoted, old=old)

        # The step again, before the watch looks: it reads the lagging entry (no capture, not
        # sent), finds the Pod gone, and retains it absent.
        for _ in range(100):
            try:
                lagging = await store.read_journal(slug=SLUG, execution="e1")
                break
            except errors.StoreUnavailable:
                await asyncio.sleep(0.1)
        assert lagging is not None and lagging.version == 1 and lagging.pinned.pods[0].startup is None
        lagging.removed.pods.append(records.RemovedObject(name="p1", uid="u1", outcome="absent"))
        await store.save_journal(slug=SLUG, journal=lagging)
        await store.retain(
            slug=SLUG, retained=retained(execution="e1", pods=lagging.removed.pods), journal_version=2
        )
        stored = await store.read_retained(slug=SLUG, execution="e1")
        assert stored is not None and stored.removed.pods[0].startup is None  # The loss is real.

        assert await until_answered(watch) == 1
        kept = await store.read_retained(slug=SLUG, execution="e1")
        assert kept is not None
        [pod] = kept.removed.pods
        assert (pod.outcome, pod.startup) == ("absent", capture("the refusal"))
        assert await store.read_journal(slug=SLUG, execution="e1") is None
        assert restored_count(collector) == {"retained": 1.0}


async def write_four_lives(a: operations.AsyncStore) -> tuple[records.StartupRecord, records.Retained]:
    """What the leader writes while the replica's link is held: four names claimed; e1 a launch
    capture; e2 a journal entry with a capture, one Pod removed (version 3); e3 retained with a
    capture; e4 nothing yet. Returns e1's capture and e3's retained record."""
    for execution in ("e1", "e2", "e3", "e4"):  # e4: claimed, nothing written yet.
        await a.claim(slug=SLUG, execution=execution, owner=owner(f"uid-{execution}"))
    launch = records.StartupRecord(pod="p1", uid="u1", labels={}, startup=capture("launch refusal"))
    await a.record_startup(slug=SLUG, execution="e1", record=launch)
    entry = await a.pin_journal(
        slug=SLUG,
        journal=journal(
            execution="e2",
            pods=[records.PinnedObject(name="p2", uid="u2"), records.PinnedObject(name="q2", uid="v2")],
        ),
    )
    assert isinstance(entry, records.Journal)
    entry.pinned.pods[0].startup = capture("cleanup refusal")
    entry.pinned.pods[0].sent = True
    await a.save_journal(slug=SLUG, journal=entry)
    entry.removed.pods.append(
        records.RemovedObject(name="p2", uid="u2", outcome="deleted", startup=capture("cleanup refusal"))
    )
    await a.save_journal(slug=SLUG, journal=entry)  # Version 3 on the old primary.
    await a.pin_journal(
        slug=SLUG, journal=journal(execution="e3", pods=[records.PinnedObject(name="p3", uid="u3")])
    )
    done = retained(
        execution="e3",
        pods=[records.RemovedObject(name="p3", uid="u3", outcome="deleted", startup=capture("retained"))],
    )
    await a.retain(slug=SLUG, retained=done, journal_version=1)
    return launch, done


async def test_each_replica_restores_what_it_wrote_once_and_another_writers_progress_stays(
    sentinel_topology: SentinelTopology,
) -> None:
    """Two operator replicas: the one that led before (its writes replicated, but for the last
    one, a step finishing as it lost the Lease) and the leader now (its writes lost). Each puts
    back what it wrote, whether it leads or not, each record once; what another writer stored on
    the new primary meanwhile stays, with the captures it lacked added."""
    config = sentinel_topology.settings(redis_min_replicas=0)
    metrics_a, metrics_b = metrics.Metrics(), metrics.Metrics()
    async with (
        operations.open_store(config, metrics=metrics_a) as a,
        operations.open_store(config, metrics=metrics_b) as b,
    ):
        assert a.recent is not None and b.recent is not None
        watch_a, watch_b = primary_watch(a, metrics_a), primary_watch(b, metrics_b)
        # b leads first; what it writes reaches the replica.
        await b.claim(slug=SLUG, execution="e0", owner=owner("uid-0"))
        b_capture = records.StartupRecord(pod="p0", uid="u0", labels={}, startup=capture("b's capture"))
        await b.record_startup(slug=SLUG, execution="e0", record=b_capture)
        await asyncio.to_thread(sentinel_topology.wait_in_sync)
        assert await watch_a.check() == 0 and await watch_b.check() == 0

        sentinel_topology.relay.hold()
        # b's last step finishes as it loses the Lease to a; a takes over and writes.
        late = records.StartupRecord(pod="p5", uid="u5", labels={}, startup=capture("b's last capture"))
        await b.record_startup(slug=SLUG, execution="e5", record=late)
        launch, done = await write_four_lives(a)

        old = await asyncio.to_thread(sentinel_topology.kill_primary)
        new = await asyncio.to_thread(sentinel_topology.wait_promoted, old=old)
        direct = redis.Redis(port=new.port, decode_responses=True)
        assert direct.hget(a.key(SLUG, store_.STARTUP_DIAGNOSTICS), "e1") is None  # The loss is real.
        assert direct.hget(a.key(SLUG, store_.OWNERS), "e1") is None
        # Another writer on the new primary: it pinned e2 afresh (version 1) and went on (version 2),
        # sending the delete of q2 and finding p2 gone; no capture, since p2 was deleted already.
        theirs = journal(
            version=2,
            execution="e2",
            pods=[
                records.PinnedObject(name="p2", uid="u2"),
                records.PinnedObject(name="q2", uid="v2", sent=True),
            ],
            removed=[records.RemovedObject(name="p2", uid="u2", outcome="absent")],
        )
        direct.hset(a.key(SLUG, store_.OWNERS), "e2", records.dump(owner("uid-e2")))
        direct.hset(a.key(SLUG, store_.JOURNAL), "e2", records.dump(theirs))

        assert direct.hget(b.key(SLUG, store_.STARTUP_DIAGNOSTICS), "e5") is None
        assert await until_answered(watch_b) == 1  # Its last capture; e0 was there.
        assert await until_answered(watch_a) == 4
        assert await watch_a.check() == 0 and await watch_b.check() == 0  # Once each.
        assert restored_count(metrics_a) == {"startup": 1.0, "journal": 1.0, "retained": 1.0, "owner": 1.0}
        assert restored_count(metrics_b) == {"startup": 1.0}
        assert await b.read_startup(slug=SLUG, execution="e5") == late

        assert await a.read_startup(slug=SLUG, execution="e1") == launch
        for execution in ("e1", "e3", "e4"):  # The owner claims went back, with the records or alone.
            assert await a.owner(slug=SLUG, execution=execution) == owner(f"uid-{execution}")
        merged = await a.read_journal(slug=SLUG, execution="e2")
        assert merged is not None and merged.version == 3
        assert [(p.uid, p.sent, p.startup) for p in merged.pinned.pods] == [
            ("u2", None, capture("cleanup refusal")),
            ("v2", True, None),
        ]
        assert [(p.uid, p.outcome, p.startup) for p in merged.removed.pods] == [
            ("u2", "absent", capture("cleanup refusal"))
        ]
        kept = await a.read_retained(slug=SLUG, execution="e3")
        assert kept == done
        direct.close()


async def test_a_restore_never_brings_back_a_forgotten_or_replaced_life(
    sentinel_topology: SentinelTopology,
) -> None:
    """``records forget`` leaves a tombstone, and a name's new owner is another life: the records
    an earlier life wrote stay gone, though the process that wrote them still holds them."""
    async with watched_store(sentinel_topology) as (store, collector, watch):
        for execution in ("e1", "e2"):
            await store.claim(slug=SLUG, execution=execution, owner=owner(f"old-{execution}"))
            await store.record_startup(
                slug=SLUG,
                execution=execution,
                record=records.StartupRecord(pod="p", uid="u", labels={}, startup=capture("old life")),
            )
        people = store_.connect(sentinel_topology.settings(redis_min_replicas=0))
        for execution in ("e1", "e2"):
            assert people.forget(slug=SLUG, execution=execution) == 2  # The owner claim and the capture.
        # e2 is applied again: its new life claims the name.
        await store.claim(slug=SLUG, execution="e2", owner=owner("new-e2"))
        await asyncio.to_thread(sentinel_topology.wait_in_sync)

        old = await asyncio.to_thread(sentinel_topology.kill_primary)
        await asyncio.to_thread(sentinel_topology.wait_promoted, old=old)
        assert await until_answered(watch) == 0
        for execution in ("e1", "e2"):
            assert await store.read_startup(slug=SLUG, execution=execution) is None
        assert await store.owner(slug=SLUG, execution="e1") is None
        assert await store.owner(slug=SLUG, execution="e2") == owner("new-e2")
        skipped = counted(collector, name="agentihooks_swarm_evidence_restore_skipped", label="reason")
        # e1: its capture and its owner claim; e2: the old life's capture (its claim is the new life's now).
        assert skipped == {"forgotten": 2.0, "owner_changed": 1.0}
        people.redis.close()


def watched(collector: metrics.Metrics) -> tuple[float, float]:
    """``failover_watched`` and ``evidence_restore_skipped_total{reason="unwatched"}``."""
    gauge = skipped = 0.0
    for family in collector.registry.collect():
        for s in family.samples:
            if s.name == "agentihooks_swarm_failover_watched":
                gauge = s.value
            if (
                s.name == "agentihooks_swarm_evidence_restore_skipped_total"
                and s.labels["reason"] == "unwatched"
            ):
                skipped = s.value
    return gauge, skipped


@pytest.mark.parametrize("topology_kind", ["cluster", "info refused"])
async def test_a_topology_the_watch_cannot_follow_is_said_not_skipped_silently(
    topology_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    with contextlib.ExitStack() as stack:
        if topology_kind == "cluster":
            cluster = stack.enter_context(ClusterTopology())
            config = cluster.settings()
        else:
            server = RedisServer()
            server.start()
            stack.callback(server.close)
            admin = redis.Redis(port=server.port)
            admin.execute_command("ACL", "SETUSER", "default", "-info")  # type: ignore[no-untyped-call,unused-ignore]
            admin.close()
            config = settings.Settings(redis_url=server.url, redis_timeout_seconds=3)
        collector = metrics.Metrics()
        async with operations.open_store(config, metrics=collector) as store:
            assert store.recent is not None
            watch = primary_watch(store, collector)
            with caplog.at_level("WARNING", logger="agentihooks_swarm.storage.failover"):
                assert await watch.check() is None
                assert await watch.check() is None
    assert watched(collector) == (0.0, 1.0)  # Said once, not on every look.
    [said] = [r.getMessage() for r in caplog.records if "not watched for failovers" in r.getMessage()]
    assert ("Redis Cluster" if topology_kind == "cluster" else "INFO replication is refused") in said
