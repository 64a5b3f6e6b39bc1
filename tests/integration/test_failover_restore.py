"""Evidence a failover lost, put back by the operator that wrote it: a real Sentinel topology.

The soak found it (seed 20261201): records acknowledged by a replica were missing at the end, after
a burst of failovers promoted a replica that never had them. Here the same class of loss is made
deterministic. The replica's link is held back (its relay stops forwarding), the operator's store
writes a launch capture, a journal entry with a capture and a retained record (acknowledged by the
primary alone: ``REDIS_MIN_REPLICAS=0``, the one way to make an acknowledged write miss the
replica that is promoted every time), the primary is killed and Sentinel promotes the replica.

The test first reads the new primary and finds every record missing (the loss is real), and a
retained record a step wrote there without the capture. Then one look of the primary watch puts
each record back, the retained one with the capture added to what the step wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from agentihooks_swarm import failover, metrics, records, settings, store as store_
from tests.support.redis_sentinel import SentinelTopology

pytestmark = pytest.mark.integration

SLUG = "failover"


@pytest.fixture
def topology() -> Iterator[SentinelTopology]:
    with SentinelTopology() as started:
        yield started


def capture(line: str) -> records.StartupCapture:
    return records.StartupCapture(
        phase="Failed",
        reason="",
        containers=[records.ContainerCapture(name="w", terminated={"exitCode": 3}, log=f"{line}\n")],
    )


def retained(pods: list[records.RemovedObject], *, watermark: int = 0) -> records.Retained:
    return records.Retained(
        execution="e3",
        final=records.FinalRecord(
            execution="e3", generation=1, state=records.FinalState.FAILED, outcome="attempt-outcomes"
        ),
        watermark=watermark,
        archived=True,
        removed=records.RemovedObjects(pods=pods),
    )


def restored_count(collector: metrics.Metrics) -> dict[str, float]:
    return {
        s.labels["record"]: s.value
        for family in collector.registry.collect()
        if family.name == "agentihooks_swarm_evidence_restored"
        for s in family.samples
        if s.name.endswith("_total")
    }


async def test_records_a_failover_lost_are_put_back_by_their_writer(topology: SentinelTopology) -> None:
    config = settings.Settings(
        redis_mode="sentinel",
        redis_sentinels=topology.addresses,
        redis_min_replicas=0,
        redis_timeout_seconds=3,
    )
    collector = metrics.Metrics()
    async with store_.open_store(config, metrics=collector) as store:
        assert store.recent is not None
        watch = failover.PrimaryWatch(store=store, recent=store.recent, metrics=collector, interval=0.1)
        assert await watch.check() == 0  # The primary as it is: nothing to restore.

        topology.relay.hold()  # From here the replica misses every write.
        launch = records.StartupRecord(pod="p1", uid="u1", labels={}, startup=capture("launch refusal"))
        await store.record_startup(slug=SLUG, execution="e1", record=launch)
        pinned = await store.pin_journal(
            slug=SLUG,
            journal=records.Journal(
                execution="e2",
                generation=1,
                pinned=records.Objects(pods=[records.PinnedObject(name="p2", uid="u2")]),
            ),
        )
        assert isinstance(pinned, records.Journal)
        pinned.pinned.pods[0].startup = capture("cleanup refusal")
        pinned.pinned.pods[0].sent = True
        await store.save_journal(slug=SLUG, journal=pinned)
        await store.pin_journal(
            slug=SLUG,
            journal=records.Journal(
                execution="e3",
                generation=1,
                pinned=records.Objects(pods=[records.PinnedObject(name="p3", uid="u3")]),
            ),
        )
        ours = retained(
            [
                records.RemovedObject(
                    name="p3", uid="u3", outcome="deleted", startup=capture("retained refusal")
                )
            ]
        )
        await store.retain(slug=SLUG, retained=ours, journal_version=1)
        assert {w.kind for w in store.recent.entries()} == {"startup", "journal", "retained"}

        old = await asyncio.to_thread(topology.kill_primary)
        new = await asyncio.to_thread(topology.wait_promoted, old=old)
        direct = redis.Redis(port=new.port, decode_responses=True)
        # The loss is real: the promoted replica has none of the three.
        assert direct.hget(store.key(SLUG, store_.STARTUP_DIAGNOSTICS), "e1") is None
        assert direct.hget(store.key(SLUG, store_.JOURNAL), "e2") is None
        assert direct.hget(store.key(SLUG, store_.RETAINED), "e3") is None
        # A step on the new primary found e3's Pod gone and retained it without the capture.
        theirs = retained([records.RemovedObject(name="p3", uid="u3", outcome="absent")], watermark=9)
        direct.hset(store.key(SLUG, store_.RETAINED), "e3", records.dump(theirs))

        for _ in range(100):  # The store's connections find the new primary through Sentinel.
            count = await watch.check()
            if count is not None:
                break
            await asyncio.sleep(0.1)
        assert count == 3
        assert await watch.check() == 0  # Once: the same primary again restores nothing.

        assert await store.read_startup(slug=SLUG, execution="e1") == launch
        journal = await store.read_journal(slug=SLUG, execution="e2")
        assert journal is not None and journal.pinned.pods[0].startup == capture("cleanup refusal")
        kept = await store.read_retained(slug=SLUG, execution="e3")
        assert kept is not None and kept.watermark == 9  # What the step wrote stays...
        assert kept.removed.pods[0].outcome == "absent"
        assert kept.removed.pods[0].startup == capture("retained refusal")  # ...with the capture back.
        assert direct.hget(store.key(SLUG, store_.JOURNAL), "e3") is None
        assert restored_count(collector) == {"startup": 1.0, "journal": 1.0, "retained": 1.0}
        direct.close()
