"""``records forget`` says who asked, on the real API server and the real Redis: a Warning Event
``RecordsForgotten`` on the Execution (or, once it is gone, the Swarm) before anything is removed,
and ``--force`` only where the operator's setting allows it."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from agentihooks_swarm import records
from agentihooks_swarm.storage import operations
from tests.support import builders, commands, watching
from tests.support.fixtures_rig import Rig

pytestmark = pytest.mark.integration

SLUG = "audited"
WHO = "alice@example.com"


async def claimed(store: operations.AsyncStore, *, execution: str, namespace: str) -> None:
    """Records of ``execution`` claimed by an Execution that no longer exists, its attempt final."""
    owner = records.Owner(uid=f"uid-of-{execution}", namespace=namespace, at="2026-12-04T00:00:00Z")
    assert await store.claim(slug=SLUG, execution=execution, owner=owner) == owner
    final = records.FinalRecord(
        execution=execution, generation=1, state=records.FinalState.FAILED, outcome="attempt-outcomes"
    )
    await store.record_final(slug=SLUG, final=final)


async def forget(
    rig: Rig, redis_url: str, *, execution: str, **options: Any
) -> subprocess.CompletedProcess[str]:
    return await commands.records_forget_in_thread(
        slug=SLUG, execution=execution, redis_url=redis_url, kubeconfig=rig.kubeconfig, **options
    )


async def test_forget_leaves_an_event_naming_who_asked_on_the_swarm(
    rig: Rig, swarm_crds: list[str], redis_url: str
) -> None:
    namespace, store = rig.namespace, rig.store
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=namespace))
    await claimed(store, execution="e1", namespace=namespace)

    freed = await forget(rig, redis_url, execution="e1", requested_by=WHO)

    assert freed.returncode == 0, freed
    assert f"Event RecordsForgotten left on Swarm/{namespace}/{SLUG}" in freed.stdout
    assert await store.read_final(slug=SLUG, execution="e1") is None
    [(kind, reason, message)] = await watching.events_for(rig.api, namespace=namespace, name=SLUG)
    assert (kind, reason) == ("Warning", "RecordsForgotten")
    assert f"requested by {WHO!r}" in message and "'e1'" in message and "--force" not in message


async def test_forget_leaves_its_event_on_an_execution_of_that_name(
    rig: Rig, swarm_crds: list[str], redis_url: str
) -> None:
    namespace, store = rig.namespace, rig.store
    await claimed(store, execution="e2", namespace=namespace)
    # Another life of the name (another UID, held back by NameInUse): forget frees the name for it.
    await watching.create(rig.api, builders.execution(name="e2", namespace=namespace, swarm=SLUG))

    freed = await forget(rig, redis_url, execution="e2", requested_by="bob")

    assert freed.returncode == 0, freed
    assert f"Event RecordsForgotten left on Execution/{namespace}/e2" in freed.stdout
    events = await watching.events_for(rig.api, namespace=namespace, name="e2")
    assert [(t, r) for t, r, m in events if "requested by 'bob'" in m] == [("Warning", "RecordsForgotten")]


async def test_force_is_refused_unless_allowed_and_who_asked_is_required(
    rig: Rig, swarm_crds: list[str], redis_url: str
) -> None:
    namespace, store = rig.namespace, rig.store
    await claimed(store, execution="e3", namespace=namespace)

    refused = await forget(rig, redis_url, execution="e3", force=True, allow_force=False, requested_by=WHO)
    unnamed = await asyncio.to_thread(commands.records_view, "forget", SLUG, "e3", redis_url=redis_url)

    assert refused.returncode == 1, refused
    assert "AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET=true" in refused.stderr
    assert unnamed.returncode == 2 and "--requested-by" in unnamed.stderr
    assert await store.read_final(slug=SLUG, execution="e3") is not None
    assert await watching.events_for(rig.api, namespace=namespace, name=SLUG) == []

    forced = await forget(rig, redis_url, execution="e3", force=True, requested_by=WHO)

    assert forced.returncode == 0, forced
    assert await store.read_final(slug=SLUG, execution="e3") is None
    [(_, reason, message)] = await watching.events_for(rig.api, namespace=namespace, name=SLUG)
    assert reason == "RecordsForgotten" and "with --force" in message and WHO in message


async def test_forget_removes_nothing_when_it_cannot_leave_its_event(
    rig: Rig, swarm_crds: list[str], redis_url: str
) -> None:
    namespace, store = rig.namespace, rig.store
    await claimed(store, execution="e4", namespace=namespace)
    rig.fault("403", method="POST", path=rf".*/namespaces/{namespace}/events")

    refused = await forget(rig, redis_url, execution="e4", requested_by=WHO)

    assert refused.returncode == 2, refused
    assert "Could not leave the RecordsForgotten Event" in refused.stderr
    assert "Nothing was removed" in refused.stderr
    assert await store.read_final(slug=SLUG, execution="e4") is not None
