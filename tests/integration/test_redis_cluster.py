"""Cluster mode, against a real 3-primary / 3-replica Redis Cluster (``redis-cli --cluster create``).

The operator's whole path — launch capture, journal, retained move, the spec's read commands and
the ``records`` CLI — works unchanged; then a burst of refusals loses nothing while the swarm's
slot moves to another primary (``redis-cli --cluster reshard``) and while its primary is killed
with SIGKILL and a replica takes over. ``REDIS_MIN_REPLICAS=1`` throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from agentihooks_swarm import metrics, settings, store as store_
from agentihooks_swarm.kubernetes import clients
from agentihooks_swarm.lifecycle import cleanup, model
from agentihooks_swarm.storage import operations
from tests.support import burst
from tests.support.cleanup_passes import run_pass
from tests.support.fixtures_cluster import api_client
from tests.support.fixtures_rig import Rig
from tests.support.planting import PLANTED
from tests.support.read_commands import READ_JOURNAL, READ_RETAINED, READ_STARTUP
from tests.support.redis_cluster import ClusterTopology
from tests.support.redis_server import RedisServerError

pytestmark = pytest.mark.integration

#: A slug whose hash slot is among the ten lowest of the first primary (0-5460 after create), so
#: ``redis-cli --cluster reshard --cluster-slots 10`` from that primary moves it.
SLUG = next(f"swarm-{i}" for i in range(100_000) if key_slot(f"swarm-{i}".encode()) < 10)
PER_PHASE = 12


def _settings(cluster_topology: ClusterTopology) -> settings.Settings:
    return cluster_topology.settings(redis_min_replicas=1, redis_min_replicas_timeout_seconds=1)


@contextlib.asynccontextmanager
async def _runtime(
    kubeconfig: Path, config: settings.Settings, collector: metrics.Metrics
) -> AsyncIterator[tuple[model.Runtime, operations.AsyncStore]]:
    async with (
        api_client(kubeconfig=kubeconfig) as api,
        operations.open_store(config, metrics=collector) as opened,
    ):
        cluster = clients.build(api=api, timeout=3)
        yield model.Runtime(cluster=cluster, recorder=opened, metrics=collector), opened


async def _run(config: settings.Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")},
        "AGENTIHOOKS_SWARM_REDIS_MODE": "cluster",
        "AGENTIHOOKS_SWARM_REDIS_URL": config.redis_url,
    }
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, *args], env=env, capture_output=True, text=True, check=False
    )


async def test_the_whole_path_and_the_read_commands_in_cluster_mode(
    cluster_topology: ClusterTopology, rig: Rig
) -> None:
    config = _settings(cluster_topology)
    launched = dataclasses.replace(await rig.attempt(execution="e1"), slug=SLUG)
    cleaned = dataclasses.replace(await rig.attempt(execution="e2"), slug=SLUG)
    first = await rig.plant(launched, exit_code=78, reason="Error")
    second = await rig.plant(cleaned, exit_code=78, reason="Error")
    rig.fault("403", path=r".*/log$", times=1)  # The first log read is cleanup's: journal stays.
    async with _runtime(rig.kubeconfig, config, metrics.Metrics()) as (runtime, opened):
        with pytest.raises(cleanup.PassFailed):
            await run_pass(runtime, opened, cleaned)
        journal = await _run(config, "-c", READ_JOURNAL, SLUG, "e2")
        assert journal.returncode == 0, journal.stderr
        [pinned] = json.loads(journal.stdout)
        assert {k: pinned[k] for k in ("name", "uid", "log_reads")} == {
            "name": cleaned.pod_name,
            "uid": second["metadata"]["uid"],
            "log_reads": 1,
        }
        assert set(pinned) == {"name", "uid", "log_reads", "log_read_failed_at", "log_read_error"}
        retained = await run_pass(runtime, opened, cleaned)
        assert [r.outcome for r in retained.removed.pods] == ["deleted"]
        removal = await burst.remove(runtime, [burst.Planted(attempt=launched, uid=first["metadata"]["uid"])])
        assert removal == {"e1": True}

    startup = await _run(config, "-c", READ_STARTUP, SLUG, "e1")
    assert startup.returncode == 0, startup.stderr
    record = json.loads(startup.stdout)
    assert (record["uid"], record["startup"]["containers"][0]["terminated"]["exitCode"]) == (
        first["metadata"]["uid"],
        78,
    )
    assert record["startup"]["containers"][0]["log"].endswith(PLANTED.decode())
    kept = await _run(config, "-c", READ_RETAINED, SLUG, "e2")
    assert kept.returncode == 0, kept.stderr
    [entry] = json.loads(kept.stdout)
    assert (entry["name"], entry["outcome"], entry["log_reads"]) == (cleaned.pod_name, "deleted", 1)
    for view, execution in (("startup", "e1"), ("retained", "e2")):
        shown = await _run(config, "-m", "agentihooks_swarm", "records", view, SLUG, execution)
        assert shown.returncode == 0, shown.stderr
    gone = await _run(config, "-m", "agentihooks_swarm", "records", "journal", SLUG, "e2")
    assert gone.returncode == 1, gone.stderr


def _read(
    people: store_.Store, cluster_topology: ClusterTopology, execution: str, *, seed: int
) -> str | None:
    """``execution``'s launch capture as the spec's read command reads it, retried for 60 s while
    the cluster does not serve the read."""
    deadline = time.monotonic() + 60
    while True:
        try:
            raw = people.redis.hget(people.key(SLUG, store_.STARTUP_DIAGNOSTICS), execution)
        except (
            redis.exceptions.ClusterDownError,
            redis.exceptions.SlotNotCoveredError,
            redis.exceptions.ConnectionError,
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"seed {seed}: no read in 60 s\n{cluster_topology.describe()}") from None
            time.sleep(0.5)
            continue
        return None if raw is None else str(raw)


async def test_a_slot_move_and_a_primary_failover_during_refusals_lose_nothing(
    cluster_topology: ClusterTopology, rig: Rig
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    config = _settings(cluster_topology)
    collector = metrics.Metrics()
    planted = await burst.plant(
        rig.api, rig.cluster, namespace=rig.namespace, slug=SLUG, prefix="e", count=2 * PER_PHASE
    )
    index = store_.key(config.key_prefix, SLUG, store_.RETENTION_INDEX)
    removed: dict[str, bool] = {}
    moves: list[tuple[int, int, int]] = []  # (from, to, owner afterwards)

    async def fault(action: str, reached: asyncio.Event) -> None:
        await reached.wait()
        await asyncio.sleep(rng.uniform(0, 0.1))
        if action == "reshard":
            source, target = await asyncio.to_thread(cluster_topology.move_slot, key=index, count=10)
            moves.append(
                (source, target, await asyncio.to_thread(lambda: cluster_topology.owner(index)["port"]))
            )
            return
        victim = await asyncio.to_thread(cluster_topology.kill_owner, key=index)
        await asyncio.to_thread(cluster_topology.wait_promoted, old=victim, key=index)
        await asyncio.to_thread(victim.start)  # Back as the new primary's replica (its nodes.conf).
        await asyncio.to_thread(cluster_topology.wait_replicated)

    async with _runtime(rig.cluster.kubeconfig, config, collector) as (runtime, _):
        for phase, action in enumerate(("reshard", "failover")):
            items = planted[phase * PER_PHASE : (phase + 1) * PER_PHASE]
            after = rng.randint(2, PER_PHASE // 2)
            reached = asyncio.Event()
            task = asyncio.create_task(fault(action, reached))

            def done(count: int, reached: asyncio.Event = reached, after: int = after) -> None:
                if count >= after:
                    reached.set()

            try:
                removed |= await burst.remove(runtime, items, spacing=0.15, done=done)
                await task
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    people = store_.connect(config)  # The spec's read command, in cluster mode.
    # What is checked is what Redis kept, once the cluster serves reads again: a node that has
    # not yet heard the cluster's gossip after its restart answers CLUSTERDOWN for a moment. A
    # slot the cluster lost for good (ClusterTopology.restart_replicas says how Redis 7.0 did)
    # fails the read after 60 s, with each node's view.
    try:
        await asyncio.to_thread(cluster_topology.wait_healthy, timeout=60)
    except RedisServerError as e:
        print(f"seed {seed}: reading anyway; {e}")

    missing = burst.lost(
        planted, removed, read=lambda execution: _read(people, cluster_topology, execution, seed=seed)
    )
    deleted = sum(removed.values())
    print(
        f"seed {seed}: slot {key_slot(index.encode())} moved {moves}; {len(planted)} refused pods, "
        f"{deleted} deleted, {len(planted) - deleted} kept, evidence lost for {len(missing)}"
    )
    [(source, target, owner)] = moves
    assert source != target and owner == target, "the swarm's slot did not move"
    assert missing == [], f"seed {seed}: deleted without their evidence: {missing}"
    assert deleted >= PER_PHASE, f"seed {seed}: too few deletes ({deleted}) for the run to prove anything"
