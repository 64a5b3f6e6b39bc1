"""``records forget`` on the real API server and the real Redis: it frees a name only once the
Execution that owns its records (by UID) is gone, and says which one holds it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records, store as store_
from agentihooks_swarm.storage import operations
from tests.support import builders, commands, stored_records, watching
from tests.support.fixtures_rig import Rig

pytestmark = pytest.mark.integration

SLUG = "forgetful"


async def forget(
    *, redis_url: str, kubeconfig: Path | None, execution: str, force: bool = False
) -> subprocess.CompletedProcess[str]:
    return await commands.records_forget_in_thread(
        slug=SLUG, execution=execution, redis_url=redis_url, kubeconfig=kubeconfig, force=force
    )


async def claimed(store: operations.AsyncStore, *, execution: str, uid: str, namespace: str) -> records.Owner:
    """The name claimed for ``uid``, with a retained record, as a Done attempt leaves it."""
    owner = records.Owner(uid=uid, namespace=namespace, at="2026-12-03T00:00:00Z")
    assert await store.claim(slug=SLUG, execution=execution, owner=owner) == owner
    retained = stored_records.retained(execution=execution, outcome=store.key(SLUG, store_.OUTCOMES))
    await store.record_final(slug=SLUG, final=retained.final)
    pinned = await store.pin_journal(slug=SLUG, journal=stored_records.journal(execution=execution))
    assert isinstance(pinned, records.Journal)
    assert await store.retain(slug=SLUG, retained=retained, journal_version=pinned.version or 0) is retained
    return owner


async def delete_execution(api: client.ApiClient, *, namespace: str, name: str) -> None:
    await client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions", name
    )


async def test_forget_refuses_while_the_owning_execution_exists_and_frees_the_name_once_it_is_gone(
    rig: Rig, swarm_crds: list[str], redis_url: str
) -> None:
    name, admin_api, namespace, store, kubeconfig = (
        "held",
        rig.api,
        rig.namespace,
        rig.store,
        rig.cluster.kubeconfig,
    )
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))
    first_uid = (await watching.execution(admin_api, namespace=namespace, name=name))["metadata"]["uid"]
    owner = await claimed(store, execution=name, uid=first_uid, namespace=namespace)

    refused = await forget(redis_url=redis_url, kubeconfig=kubeconfig, execution=name)

    assert refused.returncode == 1, refused
    assert f"Execution {namespace}/{name} (uid {first_uid}) still exists" in refused.stderr
    assert "--force" in refused.stderr and refused.stdout == ""
    assert await store.owner(slug=SLUG, execution=name) == owner
    assert await store.read_retained(slug=SLUG, execution=name) is not None

    # The owner deleted, the same manifest applied again (another UID, held back by NameInUse):
    # that one does not own the records, and forget is what frees the name for it.
    await delete_execution(admin_api, namespace=namespace, name=name)
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))
    second_uid = (await watching.execution(admin_api, namespace=namespace, name=name))["metadata"]["uid"]
    assert second_uid != first_uid

    freed = await forget(redis_url=redis_url, kubeconfig=kubeconfig, execution=name)

    assert freed.returncode == 0, freed
    assert "the name is free" in freed.stdout
    assert await store.owner(slug=SLUG, execution=name) is None
    assert await store.read_retained(slug=SLUG, execution=name) is None


async def test_forget_refuses_when_it_cannot_ask_the_api_server_unless_forced(
    rig: Rig, swarm_crds: list[str], redis_url: str
) -> None:
    name, namespace, store = "unknown", rig.namespace, rig.store
    owner = await claimed(store, execution=name, uid="uid-of-an-execution", namespace=namespace)
    rig.fault("503", method="GET", path=rf".*/executions/{name}")

    unavailable = await forget(redis_url=redis_url, kubeconfig=rig.kubeconfig, execution=name)
    no_credentials = await forget(redis_url=redis_url, kubeconfig=None, execution=name)

    for refused in (unavailable, no_credentials):
        assert refused.returncode == 2, refused
        assert f"Cannot tell whether Execution {namespace}/{name} (uid {owner.uid})" in refused.stderr
        assert "--force" in refused.stderr
    assert "503" in unavailable.stderr
    assert await store.owner(slug=SLUG, execution=name) == owner

    forced = await forget(redis_url=redis_url, kubeconfig=None, execution=name, force=True)

    assert forced.returncode == 0, forced
    assert "the name is free" in forced.stdout
    assert await store.owner(slug=SLUG, execution=name) is None


async def test_forget_refuses_records_with_no_owner_claim_and_no_retained_record(
    store: operations.AsyncStore, redis_url: str
) -> None:
    """A failover can lose the claim of an Execution that is still running: with no claim to ask
    about and its attempt unfinished, forget cannot tell, and keeps the records unless forced."""
    name = "unclaimed"
    await store.record_final(
        slug=SLUG,
        final=records.FinalRecord(
            execution=name, generation=1, state=records.FinalState.FAILED, outcome="attempt-outcomes"
        ),
    )

    refused = await forget(redis_url=redis_url, kubeconfig=None, execution=name)

    assert refused.returncode == 1, refused
    assert "no owner claim and no retained record" in refused.stderr
    assert await store.read_final(slug=SLUG, execution=name) is not None
    forced = await forget(redis_url=redis_url, kubeconfig=None, execution=name, force=True)
    assert forced.returncode == 0, forced
    assert await store.read_final(slug=SLUG, execution=name) is None
