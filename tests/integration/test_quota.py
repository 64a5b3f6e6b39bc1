"""A swarm's byte quota on the real Redis and the real API server: what a swarm's keys take is
measured (whoever wrote them, and down again after ``records forget`` and retention), a launch reads
a recent measure, and with the operator running in-process, a swarm at its quota gets its new
Executions Blocked while another swarm launches, its running worker that is refused is still
captured before its Pod is deleted, and the Blocked Execution launches once ``records forget``
brings the swarm back under."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import redis
from kubernetes_asyncio import client

from agentihooks_swarm import app as app_, metrics as metrics_, settings as settings_, store as store_
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import events, quota
from agentihooks_swarm.storage import keys, operations, quota as stored
from tests.support import app_tasks, builders, commands, pods, watching
from tests.support.cluster import ControlPlane

FULL, OTHER = "full", "other"
#: A refused worker's log: 200 lines (what a capture keeps) of 300 bytes.
LONG_LOG = b"".join(b"worker startup refused: " + b"x" * 275 + b"\n" for _ in range(200))
SHORT_LOG = b"worker startup refused: config.json missing\n"
#: Under one long log's capture, far over everything else a swarm of a few Executions keeps.
BOUND = 32 * 1024
#: The worker policy's setting for the prefixes of a worker's labels and annotations.


async def record_bytes(store: operations.AsyncStore, slug: str) -> int:
    """The bytes of the swarm's records themselves: every field name and value of its hashes."""
    total = 0
    for name in keys.RECORDS:
        found = await store.redis.hgetall(store.key(slug, name))
        total += sum(len(field) + len(value) for field, value in found.items())
    return total


async def test_what_a_swarm_keeps_is_measured_whoever_wrote_it_and_goes_down_with_retention_and_forget(
    store: operations.AsyncStore, redis_url: str
) -> None:
    slug = "measured"
    assert await stored.stored_bytes(store, slug=slug) == 0
    captured = json.dumps({"pod": "p", "startup": {"log": "x" * 65_536}})
    await store.redis.hset(store.key(slug, keys.STARTUP_DIAGNOSTICS), "a", captured)
    await store.redis.zadd(store.key(slug, keys.RETENTION_INDEX), {"a": store.clock()})
    with_capture = await stored.stored_bytes(store, slug=slug)
    assert with_capture >= await record_bytes(store, slug) >= 65_536
    # A worker that writes its outcome around the worker command's script is counted all the same.
    await store.redis.hset(store.key(slug, keys.OUTCOMES), "a", "y" * 100_000)
    with_outcome = await stored.stored_bytes(store, slug=slug)
    assert with_outcome >= with_capture + 100_000 and with_outcome >= await record_bytes(store, slug)
    # An execution retained long ago goes with the retention sweep, and its bytes with it.
    await store.redis.hset(store.key(slug, keys.RETAINED), "b", "z" * 50_000)
    await store.redis.zadd(store.key(slug, keys.RETENTION_INDEX), {"b": 0})
    before_sweep = await stored.stored_bytes(store, slug=slug)
    swept = await store.sweep(slug=slug, retention_seconds=60)
    assert (swept.removed, swept.kept) == (1, 0)
    after_sweep = await stored.stored_bytes(store, slug=slug)
    assert after_sweep <= before_sweep - 50_000
    # records forget removes the rest; its tombstones are all that is left.
    sync = store_.Store(client=redis.Redis.from_url(redis_url), prefix=store.prefix)
    try:
        assert sync.forget(slug=slug, execution="a") == 2
    finally:
        sync.redis.close()
    assert await stored.stored_bytes(store, slug=slug) < 1_000
    assert await stored.stored_bytes(store, slug="another") == 0


async def test_a_launch_reads_a_recent_measure_and_a_swarm_at_its_bound_is_held_back_once(
    store: operations.AsyncStore,
) -> None:
    now = [100.0]
    metrics = metrics_.Metrics()
    bounded = quota.Quota(store=store, metrics=metrics, bound=10_000, clock=lambda: now[0])
    slug = "cached"
    assert await bounded.reached(slug=slug) is None
    await store.redis.hset(store.key(slug, keys.STARTUP_DIAGNOSTICS), "a", "x" * 20_000)
    assert await bounded.reached(slug=slug) is None  # The measure of a moment ago.
    now[0] += quota.MAX_AGE
    reached = await bounded.reached(slug=slug)
    assert reached is not None and reached.used >= 20_000 and reached.bound == 10_000
    sample = metrics.registry.get_sample_value
    assert sample("agentihooks_swarm_stored_bytes", {"swarm": slug}) == reached.used
    assert sample("agentihooks_swarm_quota_bytes", {"swarm": slug}) == 10_000

    notes = events.Collected()
    assert await bounded.at_bound(slug=slug) == reached
    answer = bounded.hold(slug=slug, reached=reached, status={}, notes=notes)
    assert answer.phase == "Blocked"
    [(kind, reason, message)] = notes.items
    assert (kind, reason) == ("Warning", "QuotaExceeded") and message == answer.conditions[0]["message"]
    again = events.Collected()
    held = {"phase": "Blocked", "conditions": [dict(answer.conditions[0])]}
    assert bounded.hold(slug=slug, reached=reached, status=held, notes=again).phase == "Blocked"
    assert again.items == []  # Held back already: no second Event, counted once.
    assert sample("agentihooks_swarm_quota_blocked_total", {"swarm": slug}) == 1

    # 0 holds nothing back, and a launch then measures nothing; the leader's round measures every
    # swarm with records and every one measured before, whatever the bound.
    off = quota.Quota(store=store, metrics=metrics_.Metrics(), bound=0)
    assert await off.reached(slug=slug) is None and off.known() == []

    async def listed() -> list[str]:
        return ["listed"]

    await off.measure_all(swarms=listed)
    assert off.known() == ["listed"]
    assert off.metrics.registry.get_sample_value("agentihooks_swarm_quota_bytes", {"swarm": "listed"}) == 0


@contextlib.asynccontextmanager
async def operator(
    kubeconfig: Path, store: operations.AsyncStore, namespace: str, *, bound: int
) -> AsyncIterator[app_.App]:
    """The operator's tasks (all but kopf's), wired as ``run`` wires them, in this event loop."""
    # The test workers' kwok annotations are prefixed keys, which the worker policy must allow.
    settings = settings_.Settings.model_validate(
        {
            "namespace": namespace,
            "cleanup_interval_seconds": 0.5,
            "lease_duration_seconds": 6,
            "api_timeout_seconds": 3,
            "swarm_quota_bytes": bound,
            "worker_metadata_prefixes": pods.PREFIX,
        }
    )
    async with app_tasks.running(
        kubeconfig=kubeconfig, store=store, settings=settings, identity="quota-test"
    ) as app:
        yield app


async def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return await watching.status_of(api, namespace, name)


async def phase_is(api: client.ApiClient, namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    found = await status(api, namespace, name)
    return found if found.get("phase") in phases else None


async def refuse(api: client.ApiClient, namespace: str, execution: str) -> None:
    """The running worker of ``execution`` exits 78 now, as a worker refused at its startup does."""
    failed = {"metadata": {"annotations": pods.protocol_annotations(phase="Failed", exit_code=78)}}
    worker = labels.worker_pod_name(execution=execution, generation=1)
    await client.CoreV1Api(api).patch_namespaced_pod(worker, namespace, failed)


async def test_a_swarm_at_its_quota_waits_others_launch_captures_go_on_and_forget_releases_it(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    store: operations.AsyncStore,
    redis_url: str,
) -> None:
    running = pods.protocol_annotations(phase="Running")
    for slug in (FULL, OTHER):
        await watching.create(admin_api, builders.swarm(name=slug, namespace=namespace, annotations=running))
    for name, log in (("old", LONG_LOG), ("first", SHORT_LOG)):
        await pods.plant_log(
            cluster=control_plane,
            namespace=namespace,
            pod=labels.worker_pod_name(execution=name, generation=1),
            container="worker",
            content=log,
        )
    async with operator(control_plane.kubeconfig, store, namespace, bound=BOUND) as app:
        assert app.quota is not None
        # Two workers launch while the swarm is under its quota; one is refused with a long log.
        for name in ("old", "first"):
            await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=FULL))
        for name in ("old", "first"):
            await watching.eventually(partial(phase_is, admin_api, namespace, name, "Running"), what=name)
        await refuse(admin_api, namespace, "old")
        await watching.eventually(lambda: phase_is(admin_api, namespace, "old", "Done"), what="old Done")
        used = await app.quota.used(slug=FULL, fresh=True)  # The leader's round, now.
        assert used >= BOUND

        # Over it: a new Execution of the swarm waits, and says why; another swarm launches.
        await watching.create(admin_api, builders.execution(name="second", namespace=namespace, swarm=FULL))
        await watching.create(admin_api, builders.execution(name="third", namespace=namespace, swarm=OTHER))
        blocked = await watching.eventually(
            lambda: phase_is(admin_api, namespace, "second", "Blocked"), what="second Blocked"
        )
        [launched] = [c for c in blocked["conditions"] if c["type"] == "Launched"]
        assert (launched["status"], launched["reason"]) == ("False", "QuotaExceeded")
        assert f"Swarm {FULL}'s keys take " in launched["message"]
        assert f"its quota of 32.0 KiB ({BOUND} bytes)" in launched["message"]
        assert f"records forget {FULL} NAME" in launched["message"]
        await watching.eventually(
            lambda: phase_is(admin_api, namespace, "third", "Running"), what="third (swarm other) Running"
        )
        await watching.events_once(admin_api, namespace=namespace, name="second", reasons={"QuotaExceeded"})

        # The worker that was running when the swarm went over is refused: captured, then deleted.
        await refuse(admin_api, namespace, "first")
        await watching.eventually(lambda: phase_is(admin_api, namespace, "first", "Done"), what="first Done")
        worker = labels.worker_pod_name(execution="first", generation=1)
        assert not await pods.pod_exists(admin_api, namespace=namespace, name=worker)
        retained = await store.read_retained(slug=FULL, execution="first")
        assert retained is not None
        [removed] = retained.removed.pods
        assert removed.outcome == "deleted" and removed.startup is not None
        assert (removed.startup.containers[0].log or "").endswith(SHORT_LOG.decode())
        assert (await status(admin_api, namespace, "second")).get("phase") == "Blocked"
        assert not await pods.pod_exists(
            admin_api, namespace=namespace, name=labels.worker_pod_name(execution="second", generation=1)
        )
        sample = app.metrics.registry.get_sample_value
        assert sample("agentihooks_swarm_quota_blocked_total", {"swarm": FULL}) == 1

        # The old Execution goes (its records stay); forgetting them brings the swarm back under.
        await client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
            "swarm.agentihooks.io", "v1alpha1", namespace, "executions", "old"
        )
        forgot = await commands.records_forget_in_thread(
            slug=FULL, execution="old", redis_url=redis_url, kubeconfig=control_plane.kubeconfig
        )
        assert forgot.returncode == 0, forgot.stderr
        await watching.eventually(
            lambda: phase_is(admin_api, namespace, "second", "Running"), what="second launched", timeout=60
        )
        assert (sample("agentihooks_swarm_stored_bytes", {"swarm": FULL}) or 0) < BOUND


async def test_another_namespaces_swarm_at_its_quota_is_answered_slug_in_use_not_its_bytes(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    store: operations.AsyncStore,
) -> None:
    # The name is another namespace's, and its swarm is over the quota.
    assert await store.slugs.claim(slug=FULL, namespace="another-team") == "another-team"
    await store.redis.hset(store.key(FULL, keys.STARTUP_DIAGNOSTICS), "theirs", "x" * (2 * BOUND))
    await watching.create(admin_api, builders.swarm(name=FULL, namespace=namespace))
    async with operator(control_plane.kubeconfig, store, namespace, bound=BOUND) as app:
        assert app.quota is not None
        await watching.create(admin_api, builders.execution(name="mine", namespace=namespace, swarm=FULL))
        found = await watching.eventually(
            lambda: phase_is(admin_api, namespace, "mine", "Invalid"), what="mine Invalid"
        )
        [invalid] = [c for c in found["conditions"] if c["type"] == "Invalid"]
        assert invalid["reason"] == "SlugInUse" and "another-team" in invalid["message"], found
        # Nothing of the other swarm's bytes is shown: no QuotaExceeded answer, Event or count.
        assert "QuotaExceeded" not in json.dumps(found)
        await watching.events_once(admin_api, namespace=namespace, name="mine", reasons={"SlugInUse"})
        listed = await client.CoreV1Api(admin_api).list_namespaced_event(namespace)
        assert not [e for e in listed.items if e.reason == "QuotaExceeded"]
        assert (
            app.metrics.registry.get_sample_value("agentihooks_swarm_quota_blocked_total", {"swarm": FULL})
            is None
        )
    assert await store.owner(slug=FULL, execution="mine") is None
