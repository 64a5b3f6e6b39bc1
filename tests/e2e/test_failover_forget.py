"""A name's records forgotten, the name used again, and Redis restarted while the new worker runs.

Issue 27, as a user meets it. An Execution goes ``Done`` (its hand refused, its worker captured at
launch and removed, its records retained); the user deletes it, runs ``records forget`` and applies
it again, as the ``NameInUse`` condition tells them to. While the new worker runs, the one Redis
(AOF, as the chart runs it) restarts: its replication id is new, and the operator's primary watch
takes that for a failover that may have lost writes. Its restore must not give the new Execution
the records the user forgot: the new worker is captured and removed when it fails, the Execution is
``Done`` only after that, and the old launch capture and retained record stay gone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio
from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from tests.support import commands, planting, pods, watching
from tests.support.fixtures_scene import Scene
from tests.support.marked_workers import (
    PREFIX,
    SLUG,
    assert_one_capture_of_its_own,
    fail_worker,
    journal_entries,
    plant_marker,
    worker_pods,
)
from tests.support.operator_process import OperatorProcess
from tests.support.redis_server import RedisServer

#: How long the new worker runs on after Redis answers again. The primary watch looks once a
#: second and restores at its first look that finds the new replication id; a running worker's
#: Execution is stepped by every sixth resync (3 s here) or when its Pod changes. A restore that
#: gave the new Execution the old records made it ``Done`` within about 5 s of the restart.
HOLD_SECONDS = 12.0
#: The hashes that hold an execution's records (what ``records forget`` removes).
HASHES = (
    store_.STARTUP_DIAGNOSTICS,
    store_.HANDS,
    store_.FINALS,
    store_.HEARTBEATS,
    store_.OUTCOMES,
    store_.RETAINED,
    store_.OWNERS,
    store_.JOURNAL,
)


@pytest.fixture
def redis_url(aof_redis_server: RedisServer) -> str:
    """The operator, the forget command and the test's reads all use the test's own AOF Redis."""
    return aof_redis_server.url


async def replication_id(url: str) -> str:
    connection = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        info = await connection.info("replication")
    finally:
        await connection.aclose()
    return str(info["master_replid"])


async def records_of(url: str, execution: str) -> dict[str, Any]:
    """Every record of ``execution`` in its swarm's hashes, by hash name (present ones only)."""
    connection = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        found = {name: await connection.hget(store_.key(PREFIX, SLUG, name), execution) for name in HASHES}
    finally:
        await connection.aclose()
    return {name: watching.loads(raw) for name, raw in found.items() if raw is not None}


async def not_done_while_it_runs(
    scene: Scene, *, name: str, pod: str, process: OperatorProcess, seconds: float
) -> None:
    """For ``seconds``: the worker Pod is there and its Execution is not ``Done``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = await scene.status(name)
        if status.get("phase") == "Done":
            held = await records_of(scene.redis_url, name)
            raise AssertionError(
                f"{name} went Done while its worker {pod} was still running (never failed, never "
                f"captured): status {status}; its records in Redis now: {held}"
            )
        assert await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod), (
            f"{pod} went while running"
        )
        assert process.running, f"the operator died:\n{process.tail()}"
        await asyncio.sleep(0.1)


async def refused_at_launch(scene: Scene, *, name: str) -> str:
    """Before the operator runs: the first life's Execution, and its worker Pod as a launch that
    stopped before recording its hand leaves it (owned, refused at startup: Failed). Its name."""
    await scene.execution(name=name, swarm=SLUG, project="outside")
    return await planting.plant_refused_worker(
        scene.api, scene.cluster, namespace=scene.namespace, slug=SLUG, execution=name
    )


async def first_life(scene: Scene, *, name: str, process: OperatorProcess) -> str:
    """The first life (:func:`refused_at_launch`): its Pod adopted, its hand refused, its Pod
    captured at launch and removed; Done, with its records retained. Its Pod's UID."""
    first = await scene.until_phase(name, "Done", process=process)
    assert first["outcome"] == "refused", first
    old = await records_of(scene.redis_url, name)
    assert old[store_.STARTUP_DIAGNOSTICS]["startup"]["containers"][0]["log"].endswith(
        planting.PLANTED.decode()
    )
    assert store_.RETAINED in old, old
    return str(old[store_.STARTUP_DIAGNOSTICS]["uid"])


async def forget(scene: Scene, *, name: str, process: OperatorProcess) -> None:
    """The user deletes the Execution and frees its name."""
    await scene.delete(name)
    await scene.until_gone(name, process=process)
    freed = commands.records_forget(
        slug=SLUG, execution=name, redis_url=scene.redis_url, kubeconfig=scene.cluster.kubeconfig
    )
    assert freed.returncode == 0 and "the name is free" in freed.stdout, freed
    assert await records_of(scene.redis_url, name) == {}


async def second_life(scene: Scene, *, name: str, process: OperatorProcess) -> tuple[str, str]:
    """The name applied again: its new worker handed and Running. Its Pod's name and UID."""
    pod = await plant_marker(scene.cluster, namespace=scene.namespace, execution=name)
    await scene.execution(name=name, swarm=SLUG)

    async def handed() -> bool:
        return bool(((await scene.status(name)).get("hand") or {}).get("handed"))

    await scene.until(handed, what="the new worker handed", process=process, timeout=60)
    await pods.wait_for_phase(scene.api, namespace=scene.namespace, name=pod, phase="Running", timeout=60)
    read: Any = await client.CoreV1Api(scene.api).read_namespaced_pod(pod, scene.namespace)
    return pod, str(read.metadata.uid)


async def test_forgotten_records_stay_gone_when_redis_restarts_while_the_new_worker_runs(
    scene: Scene, aof_redis_server: RedisServer
) -> None:
    name, redis_url = "forgotten", scene.redis_url
    await scene.swarm(name=SLUG, annotations=pods.protocol_annotations(phase="Running"))
    old_pod = await refused_at_launch(scene, name=name)
    process = scene.start(env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "0.5"})
    old_uid = await first_life(scene, name=name, process=process)
    await forget(scene, name=name, process=process)
    pod, new_uid = await second_life(scene, name=name, process=process)
    assert pod == old_pod  # The same name, generation 1: the same Pod name, another Pod.
    assert new_uid != old_uid
    second_uid = (await scene.get(name))["metadata"]["uid"]

    # Redis restarts (a real stop and start, its data kept) while the new worker runs.
    before = await replication_id(redis_url)
    await asyncio.to_thread(aof_redis_server.restart)
    assert await replication_id(redis_url) != before  # What the operator's watch sees: a new primary.
    assert store_.OWNERS in await records_of(redis_url, name)  # The AOF kept the new life's writes.

    await not_done_while_it_runs(scene, name=name, pod=pod, process=process, seconds=HOLD_SECONDS)

    # The new worker fails: it is captured and removed, and only then is its Execution Done.
    await fail_worker(scene.api, namespace=scene.namespace, pod=pod, exit_code=3, reason="Error")
    second = await scene.until_phase(name, "Done", process=process, timeout=90)
    assert second["outcome"] == "failed", second
    assert second["cleanup"]["pods"] == {pod: "deleted"}, second

    async def removed() -> bool:
        return await worker_pods(scene.api, scene.namespace) == []

    await scene.until(removed, what="the new worker removed", process=process, timeout=60)
    held = await records_of(redis_url, name)
    retained: Any = held.get(store_.RETAINED)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert retained["removed"]["pods"][0]["uid"] == new_uid, retained
    assert retained["final"]["state"] == "failed", retained
    # The old life's records stay gone: no launch capture (the new worker's hand was not refused),
    # no journal entry, and the name is the new Execution's.
    assert store_.STARTUP_DIAGNOSTICS not in held, f"the forgotten launch capture came back: {held}"
    assert held[store_.OWNERS]["uid"] == second_uid, held
    assert await journal_entries(redis_url) == {}
