"""A life whose records its user forgot stays forgotten, on the real API server and Redis.

An Execution carries no finalizer of the operator's, so a deleted one is gone at once, and a step
of it can still be on its way when its user runs ``records forget``: nothing of that life is
written back, and its worker Pod, once being deleted, is let go. An Execution still there whose
records were removed anyway (``--force``) is neither launched nor moved on, and says why."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import settings, store as store_
from agentihooks_swarm.controller import executions
from agentihooks_swarm.lifecycle import finals
from tests.support import watching
from tests.support.fixtures_rig import Rig

pytestmark = pytest.mark.integration


def forget(redis_url: str, *, slug: str, execution: str, force: bool = False) -> int | None:
    people = store_.connect(settings.Settings(redis_url=redis_url))
    try:
        return people.forget(slug=slug, execution=execution, force=force)
    finally:
        people.redis.close()


async def delete_execution(rig: Rig, name: str) -> None:
    await client.CustomObjectsApi(rig.api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", rig.namespace, "executions", name
    )


async def no_records(rig: Rig, *, slug: str, name: str) -> None:
    found = {n: await rig.store.redis.hexists(rig.store.key(slug, n), name) for n in store_.RECORDS}
    assert not any(found.values()), found


async def test_a_deleted_executions_step_in_flight_writes_nothing_back_once_its_records_are_forgotten(
    rig: Rig, redis_url: str
) -> None:
    """A user deletes a running Execution (it carries no finalizer, so it is gone at once) and
    forgets its records while a step of it is still to come: that step writes nothing of the
    forgotten life back to Redis, and lets its worker Pod go (held, being deleted)."""
    name = "forgotten"
    core = client.CoreV1Api(rig.api)
    async with rig.stepping_running(name) as (attempt, steps, launched):
        in_flight = dataclasses.replace(launched, gone=True)
        await delete_execution(rig, name)
        # As the collector does; kwok never stops it, so the step ends the attempt past its grace.
        await core.delete_namespaced_pod(attempt.pod_name, rig.namespace, grace_period_seconds=0)
        deleted_at = time.monotonic()
        assert forget(redis_url, slug=attempt.slug, execution=name) == 2  # Its owner claim and hand.

        await asyncio.sleep(max(deleted_at + finals.STOP_OVERDUE_AFTER + 1 - time.monotonic(), 0))
        done = await steps.step(in_flight)
    assert done.settled
    await no_records(rig, slug=attempt.slug, name=name)
    await rig.gone(attempt)


async def test_a_running_execution_whose_records_were_forced_away_stops_and_says_why(
    rig: Rig, redis_url: str
) -> None:
    name = "forced"
    core = client.CoreV1Api(rig.api)
    async with rig.stepping_running(name) as (attempt, steps, launched):
        assert forget(redis_url, slug=attempt.slug, execution=name, force=True) == 2
        await watching.merge_patch(
            rig.api, namespace=rig.namespace, plural="executions", name=name, body={"spec": {"cancel": True}}
        )
        assert (await steps.step(await rig.tracked(name))).settled
        status = (await watching.execution(rig.api, namespace=rig.namespace, name=name))["status"]
        assert status["phase"] == "Invalid"
        [invalid] = [c for c in status["conditions"] if c["type"] == "Invalid"]
        assert invalid["reason"] == "RecordsForgotten" and "create it anew" in invalid["message"]
        await no_records(rig, slug=attempt.slug, name=name)
        # Its worker still runs (nothing deletes it unseen); deleting the Execution lets it go.
        worker = await core.read_namespaced_pod(attempt.pod_name, rig.namespace)
        assert worker.metadata.deletion_timestamp is None
        # No longer tracked (Invalid), but as the table last saw it: a step of its deletion.
        assert executions.track(await watching.execution(rig.api, namespace=rig.namespace, name=name)) is None
        in_flight = dataclasses.replace(launched, gone=True)
        await delete_execution(rig, name)
        await core.delete_namespaced_pod(attempt.pod_name, rig.namespace, grace_period_seconds=0)
        await asyncio.sleep(finals.STOP_OVERDUE_AFTER + 1)
        assert (await steps.step(in_flight)).settled
    await no_records(rig, slug=attempt.slug, name=name)
    await rig.gone(attempt)
