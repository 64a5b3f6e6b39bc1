"""Worker Pods whose Execution vanished unwatched, judged on the real API server and real Redis:
only a Pod whose name Redis says was claimed by an Execution that is gone is adopted, once."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records
from agentihooks_swarm.controller import executions, orphans, worker_pods
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.storage import operations
from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import RuntimeFactory

pytestmark = pytest.mark.integration

SLUG = "orph"


async def plant(api: client.ApiClient, *, namespace: str, execution: str) -> None:
    body = pods.worker_pod(
        name=labels.worker_pod_name(execution=execution, generation=1),
        namespace=namespace,
        labels=labels.attempt(slug=SLUG, execution=execution, generation=1),
        phase="Running",
    )
    await client.CoreV1Api(api).create_namespaced_pod(namespace, cast(Any, body))


async def test_only_a_claimed_name_whose_execution_is_gone_is_adopted_and_only_once(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    await watching.create(admin_api, builders.execution(name="alive", namespace=namespace, swarm=SLUG))
    alive = await watching.execution(admin_api, namespace=namespace, name="alive")
    claims = {"alive": alive["metadata"]["uid"], "gone": "uid-of-the-gone-one", "elsewhere": "uid-elsewhere"}
    for name, uid in claims.items():
        where = "another-namespace" if name == "elsewhere" else namespace
        owner = records.Owner(uid=uid, namespace=where, at="2026-12-02T00:00:00Z")
        assert await store.claim(slug=SLUG, execution=name, owner=owner) == owner
    for name in ("alive", "gone", "elsewhere", "unclaimed"):
        await plant(admin_api, namespace=namespace, execution=name)
    listed: Any = await client.CoreV1Api(admin_api).list_namespaced_pod(namespace, _preload_content=False)
    table = executions.Executions(expiry=executions.Expiry(default_ttl=None))
    woken: list[str] = []
    workers = worker_pods.WorkerPods(owners=table.named, wake=woken.append)
    workers.begin()
    for item in (await listed.json())["items"]:
        workers.apply(None, item)
    workers.end()
    async with runtime_for(control_plane.kubeconfig) as runtime:
        found = orphans.Orphans(
            workers=workers,
            table=table,
            store=store,
            executions=runtime.cluster.executions,
            wake=woken.append,
        )
        assert await found.adopt() == 1
        assert await found.adopt() == 0  # Judged once.
    assert woken == [claims["gone"]]
    tracked = table.get(claims["gone"])
    assert tracked is not None and tracked.gone and tracked.deleting
    assert (tracked.namespace, tracked.name, tracked.swarm, tracked.attempt_number) == (
        namespace,
        "gone",
        SLUG,
        1,
    )
    assert table.named(namespace, "gone") == (claims["gone"],)
    assert table.get(claims["alive"]) is None and table.get(claims["elsewhere"]) is None
