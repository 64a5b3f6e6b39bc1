"""What one step writes to its Execution, on the real API server through the proxy: an attempt that
ends in the step that launched it costs one status write and one Event; a worker that outlives its
launch step costs no finalizer round trip either (its Pod's evidence finalizer keeps its evidence);
an earlier version's finalizer is removed once the attempt's cleanup is done."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes.labels import FINALIZER
from agentihooks_swarm.kubernetes.owners import EVIDENCE_FINALIZER
from tests.support import builders, pods, watching
from tests.support.fixtures_rig import Rig
from tests.support.planting import SLUG
from tests.support.proxy import Call

pytestmark = pytest.mark.integration


def _writes(calls: list[Call], *, name: str) -> list[tuple[str, str]]:
    """The step's writes to its Execution and its Events, in order: what the cluster pays for."""
    execution = f"/executions/{name}"
    return [
        (c.method, "events" if c.path.endswith("/events") else c.path.split(execution, 1)[1] or "/")
        for c in calls
        if c.method in ("POST", "PATCH") and (execution in c.path or c.path.endswith("/events"))
    ]


async def test_a_refused_launch_captured_and_removed_in_its_step_has_no_finalizer_and_one_event(
    rig: Rig,
) -> None:
    name = "refused"
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace))
    await watching.create(
        rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG, project="elsewhere")
    )
    attempt = await rig.attempt(execution=name)
    await rig.plant(attempt, exit_code=78, reason="Error")  # Adopted: the launch finds it refused.
    rig.proxy.reset_counts()
    async with rig.runtime() as runtime:
        done = await rig.steps(runtime).step(await rig.tracked(name))
    assert done.settled
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    assert after["status"]["phase"] == "Done"
    assert not after["metadata"].get("finalizers")
    assert _writes(rig.proxy.calls(), name=name) == [("PATCH", "/status"), ("POST", "events")]
    [(type_, reason, message)] = await watching.events_for(rig.api, namespace=rig.namespace, name=name)
    assert (type_, reason) == ("Warning", "StartupRefused")
    assert "class exit_code: container worker exited 78 (Error)" in message
    assert message.endswith("; attempt 1 cleaned up (nothing left)")  # Launch removal took the Pod.
    assert not await rig.exists(attempt)
    assert await rig.startup(execution=name) is not None


async def test_a_worker_that_outlives_its_launch_step_costs_no_finalizer_round_trip(rig: Rig) -> None:
    name = "runs"
    runs = pods.protocol_annotations(phase="Running", run_for="10m")
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, annotations=runs))
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    rig.proxy.reset_counts()
    async with rig.runtime() as runtime:
        done = await rig.steps(runtime).step(await rig.tracked(name))
    assert not done.settled
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    # The worker Pod's own evidence finalizer keeps its evidence through a delete of the Execution.
    assert not after["metadata"].get("finalizers")
    assert after["status"]["hand"]["handed"] is True
    assert _writes(rig.proxy.calls(), name=name) == [("PATCH", "/status"), ("POST", "events")]
    assert [r for _, r, _ in await watching.events_for(rig.api, namespace=rig.namespace, name=name)] == [
        "Handed"
    ]
    attempt = await rig.attempt(execution=name)
    worker = await client.CoreV1Api(rig.api).read_namespaced_pod(attempt.pod_name, rig.namespace)
    assert worker.metadata.finalizers == [EVIDENCE_FINALIZER]


async def test_an_earlier_versions_finalizer_is_removed_by_the_step_that_ends_the_cleanup(rig: Rig) -> None:
    """An Execution an earlier version launched carries its finalizer: the step that finds its
    attempt Done removes it (by UID and resourceVersion), so deleting it never waits."""
    name = "earlier"
    runs = pods.protocol_annotations(phase="Running", run_for="10m")
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, annotations=runs))
    manifest = builders.execution(name=name, namespace=rig.namespace, swarm=SLUG)
    manifest["metadata"]["finalizers"] = [FINALIZER]
    await watching.create(rig.api, manifest)
    async with rig.runtime() as runtime:
        steps = rig.steps(runtime)
        await steps.step(await rig.tracked(name))
        launched = await watching.execution(rig.api, namespace=rig.namespace, name=name)
        assert launched["metadata"]["finalizers"] == [FINALIZER]  # Not ours to remove while it runs.
        await watching.merge_patch(
            rig.api, namespace=rig.namespace, plural="executions", name=name, body={"spec": {"cancel": True}}
        )
        rig.proxy.reset_counts()
        done = await steps.step(await rig.tracked(name))
    assert done.settled
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    assert after["status"]["phase"] == "Done"
    assert not after["metadata"].get("finalizers")
    assert ("PATCH", "/") in _writes(rig.proxy.calls(), name=name)
