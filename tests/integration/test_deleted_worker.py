"""A handed worker whose Pod someone else deletes, on the real API server through the proxy.

Its evidence finalizer holds the Pod until cleanup has judged it. A kubelet stops a deleted Pod and
reports it ``Failed`` or ``Succeeded``, and the attempt ends the usual way; the kwok node here
never does (as a node that no longer answers), so the Pod stays ``Running`` and terminating. The
attempt must not wait for it for good: past its grace period (and
:data:`finals.STOP_OVERDUE_AFTER`), it ends ``failed`` (``WorkerPodDeleted``) and the Pod goes."""

from __future__ import annotations

import asyncio
import time

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import owners
from agentihooks_swarm.lifecycle import attempts, finals
from tests.support import watching
from tests.support.fixtures_rig import Rig

pytestmark = pytest.mark.integration


async def test_a_worker_pod_someone_deletes_that_never_stops_ends_its_attempt_failed_and_goes(
    rig: Rig,
) -> None:
    name = "deleted"
    core = client.CoreV1Api(rig.api)
    async with rig.stepping_running(name) as (attempt, steps, _):
        await core.delete_namespaced_pod(attempt.pod_name, rig.namespace, grace_period_seconds=0)
        deleted_at = time.monotonic()

        waiting = await steps.step(await rig.tracked(name))
        status = (await watching.execution(rig.api, namespace=rig.namespace, name=name))["status"]
        assert status["phase"] == "Running"
        assert status["waitingFor"] == "the kubelet to stop the worker pod someone else deleted"
        assert waiting.retry_after is not None and 0 < waiting.retry_after <= finals.STOP_OVERDUE_AFTER + 1
        held = await core.read_namespaced_pod(attempt.pod_name, rig.namespace)
        assert held.metadata.deletion_timestamp is not None
        assert owners.EVIDENCE_FINALIZER in (held.metadata.finalizers or [])

        await asyncio.sleep(max(deleted_at + finals.STOP_OVERDUE_AFTER + 1 - time.monotonic(), 0))
        for _ in range(5):  # Final, then cleanup releases it; one more step finds it gone.
            done = await steps.step(await rig.tracked(name))
            if done.settled:
                break
            await asyncio.sleep(1)
    assert done.settled
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    assert (after["status"]["phase"], after["status"]["outcome"]) == ("Done", "failed")
    assert after["status"]["reason"] == attempts.WORKER_POD_DELETED
    assert not after["metadata"].get("finalizers")
    await rig.gone(attempt)
    reasons = [r for _, r, _ in await watching.events_for(rig.api, namespace=rig.namespace, name=name)]
    assert attempts.WORKER_POD_DELETED in reasons
    kept = await rig.retained(attempt)
    assert kept["final"]["reason"] == attempts.WORKER_POD_DELETED
    assert kept["final"]["evidence"]["phase"] == "Running"
    [removed] = kept["removed"]["pods"]
    assert removed["outcome"] in ("absent", "deleted") and "startup" not in removed
