"""A name's claim that a Redis failover dropped, on the real API server and the real Redis.

A launch claims the Execution's name, creates the worker Pod and records its hand. A failover can
drop the claim and keep the hand (written on the promoted primary, or lost with a later write
only). The hand is then a record without an owner: an older version's, as far as Redis can tell,
and the name is ``NameInUse``. But an Execution that owns a worker Pod of its attempt (by UID: no
older version's Execution can) made those records itself: it claims them again and goes on with
its worker instead of settling ``Invalid`` and leaving the worker running for good."""

from __future__ import annotations

import pytest

from agentihooks_swarm import records
from agentihooks_swarm.controller import executions
from agentihooks_swarm.kubernetes import labels
from tests.support import builders, pods, watching
from tests.support.fixtures_rig import Rig
from tests.support.planting import SLUG

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("worker", [True, False], ids=["its-own-worker", "no-worker"])
async def test_records_without_an_owner_are_claimed_only_by_the_execution_that_owns_their_worker(
    rig: Rig, worker: bool
) -> None:
    name = "dropped"
    runs = pods.protocol_annotations(phase="Running", run_for="10m")
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, annotations=runs))
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    attempt = await rig.attempt(execution=name)
    pod_uid = "not-planted"
    if worker:  # As its launch left it: owned by the Execution, held by the evidence finalizer.
        planted = await rig.plant(attempt, phase="Running", run_for="10m")
        pod_uid = str(planted["metadata"]["uid"])
    hand = records.HandResult(generation=1, handed=True, pod=attempt.pod_name, pod_uid=pod_uid)
    # The hand the launch recorded, whose claim the failover dropped.
    await rig.store.redis.hset(rig.store.key(SLUG, "attempt-hands"), name, records.dump(hand))

    tracked = executions.track(await watching.execution(rig.api, namespace=rig.namespace, name=name))
    assert tracked is not None
    async with rig.runtime() as runtime:
        await rig.steps(runtime).step(tracked)
    status = (await watching.execution(rig.api, namespace=rig.namespace, name=name)).get("status") or {}
    owner = await rig.store.owner(slug=SLUG, execution=name)
    reasons = [c["reason"] for c in status.get("conditions", [])]
    if worker:
        assert owner is not None and owner.uid == tracked.uid  # Claimed again, by its own life.
        assert "NameInUse" not in reasons and status.get("phase") == "Running", status
        assert status["hand"]["podUid"] == pod_uid  # Its own worker, adopted: no second one.
        assert status["pod"] == labels.worker_pod_name(execution=name, generation=1)
    else:
        assert owner is None  # An older version's records: not taken.
        assert status.get("phase") == "Invalid" and "NameInUse" in reasons, status
