"""What one step writes to its Execution, on the real API server through the proxy: an attempt that
ends in the step that launched it costs no finalizer round trip and one Event; a worker that
outlives its launch step has the operator's finalizer before the step's status says it runs; a
finalizer that cannot be put on now is put on by the next step."""

from __future__ import annotations

from typing import Any

import pytest

from agentihooks_swarm.kubernetes.labels import FINALIZER
from agentihooks_swarm.lifecycle import work
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


async def test_a_worker_that_outlives_its_launch_step_has_the_finalizer_before_the_status(rig: Rig) -> None:
    name = "runs"
    runs = pods.protocol_annotations(phase="Running", run_for="10m")
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, annotations=runs))
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    rig.proxy.reset_counts()
    async with rig.runtime() as runtime:
        done = await rig.steps(runtime).step(await rig.tracked(name))
    assert not done.settled
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    assert after["metadata"]["finalizers"] == [FINALIZER]
    assert after["status"]["hand"]["handed"] is True
    assert _writes(rig.proxy.calls(), name=name) == [("PATCH", "/"), ("PATCH", "/status"), ("POST", "events")]
    assert [r for _, r, _ in await watching.events_for(rig.api, namespace=rig.namespace, name=name)] == [
        "Handed"
    ]
    await _release(rig, name, after)


async def test_a_finalizer_the_api_server_refused_is_put_on_by_the_next_step(rig: Rig) -> None:
    name = "later"
    runs = pods.protocol_annotations(phase="Running", run_for="10m")
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, annotations=runs))
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    refused = rig.fault("503", method="PATCH", path=rf".*/executions/{name}$", times=1)
    async with rig.runtime() as runtime:
        steps = rig.steps(runtime)
        first = await steps.step(await rig.tracked(name))
        assert refused.hits == 1
        launched = await watching.execution(rig.api, namespace=rig.namespace, name=name)
        assert not launched["metadata"].get("finalizers")  # Not yet; the status says it launched.
        assert launched["status"]["hand"]["handed"] is True
        assert first.retry_after == work.LAUNCH_RETRY
        await steps.step(await rig.tracked(name))
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    assert after["metadata"]["finalizers"] == [FINALIZER]
    await _release(rig, name, after)


async def _release(rig: Rig, name: str, body: dict[str, Any]) -> None:
    """The finalizer off again, so the namespace's teardown does not wait for a cleanup."""
    await watching.merge_patch(
        rig.api,
        namespace=rig.namespace,
        plural="executions",
        name=name,
        body={"metadata": {"finalizers": [f for f in body["metadata"]["finalizers"] if f != FINALIZER]}},
    )
