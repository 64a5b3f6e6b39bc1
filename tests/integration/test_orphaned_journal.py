"""A cleanup-journal entry whose Execution and Pods are both gone, on the real API server and real
Redis: the leader's resync finds it, the Execution's step finishes it (its pinned Pod ``absent``),
and its records are retained, so that the retention sweep can remove them like any other's."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records, store as store_
from agentihooks_swarm.controller import orphans
from agentihooks_swarm.lifecycle import cleanup, model
from agentihooks_swarm.storage import keys, operations
from tests.support import builders, pods, stored_records, watching
from tests.support.fixtures_rig import Rig
from tests.support.orphan_adoption import adopts_once, new_leader
from tests.support.planting import as_the_operator_makes_it

pytestmark = pytest.mark.integration

SLUG = "orphaned"


async def retained_earlier(store: operations.AsyncStore, *, execution: str) -> None:
    """An earlier execution of the swarm, retained: the swarm is listed for the leader's passes."""
    pinned = await store.pin_journal(slug=SLUG, journal=stored_records.journal(execution=execution))
    assert isinstance(pinned, records.Journal)
    retained = stored_records.retained(
        execution=execution, state=records.FinalState.COMPLETED, outcome=store.key(SLUG, store_.OUTCOMES)
    )
    await store.retain(slug=SLUG, retained=retained, journal_version=pinned.version or 0)


async def claimed_and_running(rig: Rig, *, name: str) -> tuple[str, model.Attempt, records.FinalRecord]:
    """Execution ``name``, its name claimed, its worker Running and its attempt final (cancelled):
    its UID, its attempt and its final record."""
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    uid = (await watching.execution(rig.api, namespace=rig.namespace, name=name))["metadata"]["uid"]
    owner = records.Owner(uid=uid, namespace=rig.namespace, at="2026-12-03T00:00:00Z")
    assert await rig.store.claim(slug=SLUG, execution=name, owner=owner) == owner
    attempt = model.Attempt(namespace=rig.namespace, slug=SLUG, execution=name, generation=1, owner_uid=uid)
    worker: Any = pods.worker_pod(
        name=attempt.pod_name,
        namespace=rig.namespace,
        labels=attempt.labels,
        phase="Running",
        **as_the_operator_makes_it(attempt),
    )
    await client.CoreV1Api(rig.api).create_namespaced_pod(rig.namespace, cast(Any, worker))
    await pods.wait_for_phase(rig.api, namespace=rig.namespace, name=attempt.pod_name, phase="Running")
    final = await rig.store.record_final(
        slug=SLUG,
        final=stored_records.final(
            execution=name,
            state=records.FinalState.CANCELLED,
            outcome=rig.store.key(SLUG, store_.OUTCOMES),
            at="2026-12-03T00:00:00Z",
        ),
    )
    return uid, attempt, final


@pytest.mark.parametrize("claim", ["kept", "lost"])
async def test_a_journal_entry_whose_execution_and_pods_are_gone_is_finished_and_retained(
    rig: Rig, swarm_crds: list[str], claim: str
) -> None:
    """``lost``: a Redis failover dropped the name's owner claim (the soak, seed 4220093611, left
    such an entry for good): the swarm's namespace says where the Execution was."""
    name, store = "left", rig.store
    assert await store.slugs.claim(slug=SLUG, namespace=rig.namespace) == rig.namespace
    await retained_earlier(store, execution="earlier")
    uid, attempt, final = await claimed_and_running(rig, name=name)
    async with rig.runtime(kubeconfig=rig.cluster.kubeconfig) as runtime:
        # A cleanup pass pinned the worker, then the operator stopped; the Execution went without
        # waiting for it (its finalizer removed by hand) and the Pod went with its node.
        pinned = await cleanup.pin(runtime=runtime, store=store, guard=model.Unguarded(), attempt=attempt)
        assert isinstance(pinned, records.Journal)
        [pinned_pod] = pinned.pinned.pods
        await pods.force_delete(rig.api, namespace=rig.namespace, name=attempt.pod_name)
        await client.CustomObjectsApi(rig.api).delete_namespaced_custom_object(
            "swarm.agentihooks.io", "v1alpha1", rig.namespace, "executions", name
        )

        if claim == "lost":
            await store.redis.hdel(store.key(SLUG, keys.OWNERS), name)
            uid = orphans.unclaimed_uid(slug=SLUG, name=name)

        # A new leader: nothing tracked, no worker Pod to find the attempt by.
        tracked = await adopts_once(
            new_leader(),
            runtime=runtime,
            store=store,
            uid=uid,
            namespace=rig.namespace,
            name=name,
            swarm=SLUG,
        )
        step = await rig.steps(runtime).step(tracked)

    assert step.settled
    assert await store.read_journal(slug=SLUG, execution=name) is None
    retained = await store.read_retained(slug=SLUG, execution=name)
    assert retained is not None and retained.final == final
    assert [(p.name, p.uid, p.outcome, p.startup) for p in retained.removed.pods] == [
        (pinned_pod.name, pinned_pod.uid, "absent", None)
    ]
    # Finished, its records are the retention sweep's like any others (a journal entry never is).
    swept = await store.sweep(slug=SLUG, retention_seconds=0)
    assert swept.removed == 2 and swept.kept == 0
    assert await store.read_retained(slug=SLUG, execution=name) is None
