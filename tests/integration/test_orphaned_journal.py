"""A cleanup-journal entry whose Execution and Pods are both gone, on the real API server and real
Redis: the leader's resync finds it, the Execution's step finishes it (its pinned Pod ``absent``),
and its records are retained, so that the retention sweep can remove them like any other's."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records, store as store_
from agentihooks_swarm.controller import executions, orphans, worker_pods
from agentihooks_swarm.lifecycle import cleanup, model, step as lifecycle
from agentihooks_swarm.storage import operations
from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import RuntimeFactory

pytestmark = pytest.mark.integration

SLUG = "orphaned"


async def retained_earlier(store: operations.AsyncStore, *, execution: str) -> None:
    """An earlier execution of the swarm, retained: the swarm is listed for the leader's passes."""
    final = records.FinalRecord(
        execution=execution,
        generation=1,
        state=records.FinalState.COMPLETED,
        transcript_end=0,
        outcome=store.key(SLUG, store_.OUTCOMES),
    )
    journal = records.Journal(execution=execution, generation=1, pinned=records.Objects())
    pinned = await store.pin_journal(slug=SLUG, journal=journal)
    assert isinstance(pinned, records.Journal)
    retained = records.Retained(
        execution=execution, final=final, watermark=0, archived=True, removed=records.RemovedObjects()
    )
    await store.retain(slug=SLUG, retained=retained, journal_version=pinned.version or 0)


async def test_a_journal_entry_whose_execution_and_pods_are_gone_is_finished_and_retained(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    name = "left"
    await retained_earlier(store, execution="earlier")
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))
    uid = (await watching.execution(admin_api, namespace=namespace, name=name))["metadata"]["uid"]
    owner = records.Owner(uid=uid, namespace=namespace, at="2026-12-03T00:00:00Z")
    assert await store.claim(slug=SLUG, execution=name, owner=owner) == owner
    attempt = model.Attempt(namespace=namespace, slug=SLUG, execution=name, generation=1)
    worker: Any = pods.worker_pod(
        name=attempt.pod_name, namespace=namespace, labels=attempt.labels, phase="Running"
    )
    await client.CoreV1Api(admin_api).create_namespaced_pod(namespace, cast(Any, worker))
    await pods.wait_for_phase(admin_api, namespace=namespace, name=attempt.pod_name, phase="Running")
    final = await store.record_final(
        slug=SLUG,
        final=records.FinalRecord(
            execution=name,
            generation=1,
            state=records.FinalState.CANCELLED,
            transcript_end=0,
            outcome=store.key(SLUG, store_.OUTCOMES),
            at="2026-12-03T00:00:00Z",
        ),
    )
    async with runtime_for(control_plane.kubeconfig) as runtime:
        # A cleanup pass pinned the worker, then the operator stopped; the Execution went without
        # waiting for it (its finalizer removed by hand) and the Pod went with its node.
        pinned = await cleanup.pin(runtime=runtime, store=store, guard=model.Unguarded(), attempt=attempt)
        assert isinstance(pinned, records.Journal)
        [pinned_pod] = pinned.pinned.pods
        await client.CoreV1Api(admin_api).delete_namespaced_pod(
            attempt.pod_name, namespace, grace_period_seconds=0
        )
        await pods.wait_for_absent(
            read=lambda: client.CoreV1Api(admin_api).read_namespaced_pod(attempt.pod_name, namespace),
            what="the worker pod",
        )
        await client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
            "swarm.agentihooks.io", "v1alpha1", namespace, "executions", name
        )

        # A new leader: nothing tracked, no worker Pod to find the attempt by.
        table = executions.Executions(expiry=executions.Expiry(default_ttl=None))
        woken: list[str] = []
        workers = worker_pods.WorkerPods(owners=table.named, wake=woken.append)
        found = orphans.Orphans(
            workers=workers,
            table=table,
            store=store,
            executions=runtime.cluster.executions,
            wake=woken.append,
        )
        assert await found.adopt() == 1
        assert await found.adopt() == 0  # Judged once.
        assert woken == [uid]
        tracked = table.get(uid)
        assert tracked is not None and tracked.gone and tracked.deleting
        assert (tracked.namespace, tracked.name, tracked.swarm, tracked.attempt_number) == (
            namespace,
            name,
            SLUG,
            1,
        )

        steps = lifecycle.Lifecycle(
            runtime=runtime,
            store=store,
            guard=model.Unguarded(),
            instance="test",
            archive_deadline_seconds=60,
        )
        step = await steps.step(tracked)

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
