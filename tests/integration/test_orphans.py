"""Worker Pods whose Execution vanished unwatched, judged on the real API server and real Redis:
only a Pod whose name Redis says was claimed by an Execution that is gone is adopted, once."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records
from agentihooks_swarm.lifecycle import model
from tests.support import builders, pods, watching
from tests.support.fixtures_rig import Rig
from tests.support.orphan_adoption import NewLeader, adopts_once, new_leader
from tests.support.planting import as_the_operator_makes_it

pytestmark = pytest.mark.integration

SLUG = "orph"


async def plant(api: client.ApiClient, *, namespace: str, execution: str, owner_uid: str = "") -> None:
    """A Running worker Pod of ``execution``, owned by Execution ``owner_uid`` as the operator's
    launch makes it (none: a look-alike). An owner that no longer exists lets the garbage collector
    delete the Pod, which its evidence finalizer holds, Terminating, for the orphan pass."""
    attempt = model.Attempt(
        namespace=namespace, slug=SLUG, execution=execution, generation=1, owner_uid=owner_uid
    )
    body = pods.worker_pod(
        name=attempt.pod_name,
        namespace=namespace,
        labels=attempt.labels,
        phase="Running",
        **as_the_operator_makes_it(attempt),
    )
    await client.CoreV1Api(api).create_namespaced_pod(namespace, cast(Any, body))


async def watching_leader(api: client.ApiClient, *, namespace: str) -> NewLeader:
    """A new leader whose worker Pods' watch has listed the namespace's Pods."""
    listed: Any = await client.CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False)
    leader = new_leader()
    leader.workers.begin()
    for item in (await listed.json())["items"]:
        leader.workers.apply(None, item)
    leader.workers.end()
    return leader


async def adopted_once(rig: Rig, *, uid: str, name: str) -> tuple[NewLeader, model.Runtime]:
    """A new leader, its watch listed, whose orphan pass adopts Execution ``uid`` (``name``, of
    the Swarm ``SLUG``) once; the leader and the runtime it ran with, for their table and metrics."""
    leader = await watching_leader(rig.api, namespace=rig.namespace)
    async with rig.runtime(kubeconfig=rig.cluster.kubeconfig) as runtime:
        await adopts_once(
            leader, runtime=runtime, store=rig.store, uid=uid, namespace=rig.namespace, name=name, swarm=SLUG
        )
    return leader, runtime


async def test_only_a_claimed_name_whose_execution_is_gone_is_adopted_and_only_once(
    rig: Rig, swarm_crds: list[str]
) -> None:
    admin_api, namespace, store = rig.api, rig.namespace, rig.store
    await watching.create(admin_api, builders.execution(name="alive", namespace=namespace, swarm=SLUG))
    alive = await watching.execution(admin_api, namespace=namespace, name="alive")
    claims = {"alive": alive["metadata"]["uid"], "gone": "uid-of-the-gone-one", "elsewhere": "uid-elsewhere"}
    for name, uid in claims.items():
        where = "another-namespace" if name == "elsewhere" else namespace
        owner = records.Owner(uid=uid, namespace=where, at="2026-12-02T00:00:00Z")
        assert await store.claim(slug=SLUG, execution=name, owner=owner) == owner
    for name in ("alive", "gone", "elsewhere"):
        await plant(admin_api, namespace=namespace, execution=name, owner_uid=claims[name])
    # Never claimed and not held by the evidence finalizer: not a Pod this operator made.
    await plant(admin_api, namespace=namespace, execution="unclaimed")
    # Claimed by a gone Execution too, but made by someone else: a look-alike, never adopted.
    owner = records.Owner(uid="uid-of-the-gone-twin", namespace=namespace, at="2026-12-02T00:00:00Z")
    assert await store.claim(slug=SLUG, execution="twin", owner=owner) == owner
    await plant(admin_api, namespace=namespace, execution="twin")
    leader, runtime = await adopted_once(rig, uid=claims["gone"], name="gone")
    assert leader.table.named(namespace, "gone") == (claims["gone"],)
    assert leader.table.get(claims["alive"]) is None and leader.table.get(claims["elsewhere"]) is None
    assert leader.table.get("uid-of-the-gone-twin") is None
    looked = runtime.metrics.look_alike_pods.labels(path="orphans")._value.get()
    assert looked == 1  # The twin, judged once.


async def test_an_unclaimed_pod_that_its_gone_execution_owns_and_holds_is_adopted(
    rig: Rig, swarm_crds: list[str]
) -> None:
    """A Redis failover can drop the claim a launch wrote before its Pod: the Pod, owned by its
    Execution and held by the evidence finalizer as only a launch makes it, is still adopted once
    its Execution is gone, so that its cleanup releases it instead of leaving it held for good."""
    admin_api, namespace, store = rig.api, rig.namespace, rig.store
    await plant(admin_api, namespace=namespace, execution="lost", owner_uid="uid-of-the-lost-claim")
    assert await store.owner(slug=SLUG, execution="lost") is None
    await adopted_once(rig, uid="uid-of-the-lost-claim", name="lost")


async def test_an_unowned_pod_its_recorded_hand_names_is_adopted_and_one_it_does_not_name_is_not(
    rig: Rig, swarm_crds: list[str]
) -> None:
    """An orphaning delete (``--cascade=orphan``) strips the worker's owner reference before its
    Execution goes, which holds no finalizer of the operator's: the hand its launch recorded names
    the Pod by UID, so the orphan pass still adopts it. An unowned Pod of a claimed name whose UID
    the hand does not name stays a look-alike."""
    admin_api, namespace, store = rig.api, rig.namespace, rig.store
    core = client.CoreV1Api(admin_api)
    for name in ("orphaned", "twin"):
        owner = records.Owner(uid=f"uid-of-{name}", namespace=namespace, at="2026-12-06T00:00:00Z")
        assert await store.claim(slug=SLUG, execution=name, owner=owner) == owner
        await plant(admin_api, namespace=namespace, execution=name)  # Unowned.
        attempt = model.Attempt(namespace=namespace, slug=SLUG, execution=name, generation=1, owner_uid="")
        planted = await core.read_namespaced_pod(attempt.pod_name, namespace)
        recorded = planted.metadata.uid if name == "orphaned" else "uid-of-the-pod-its-launch-made"
        hand = records.HandResult(generation=1, handed=True, pod=attempt.pod_name, pod_uid=recorded)
        await store.save_hand(slug=SLUG, execution=name, hand=hand)
    leader, runtime = await adopted_once(rig, uid="uid-of-orphaned", name="orphaned")
    assert leader.table.get("uid-of-twin") is None
    assert runtime.metrics.look_alike_pods.labels(path="orphans")._value.get() == 1  # The twin.
