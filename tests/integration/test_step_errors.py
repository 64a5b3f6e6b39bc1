"""A step that fails before the attempt's cleanup, on the real API server and a real Redis that
stops: the Execution keeps its phase, and its ``Synced`` condition (not ``CleanedUp``) says what
failed, until a step gets through. And a launch whose Execution cannot be read again: a spec that
can never launch is still ``Invalid``, a valid one ``LaunchFailed`` and tried again."""

from __future__ import annotations

from typing import Any

import pytest

from agentihooks_swarm import resources
from agentihooks_swarm.controller import executions
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import model, step, work
from tests.support import builders, pods, watching
from tests.support.fixtures_rig import Rig
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

SLUG = "blip"


def conditions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}


async def test_a_redis_blip_while_the_worker_runs_keeps_the_phase_and_says_so_in_synced(
    rig: Rig, swarm_crds: list[str], redis_server: RedisServer
) -> None:
    name, admin_api, namespace = "runs", rig.api, rig.namespace
    runs = pods.protocol_annotations(phase="Running", run_for="10m")
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=runs))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def tracked() -> model.Tracked:
        found = executions.track(await watching.execution(admin_api, namespace=namespace, name=name))
        assert found is not None
        return found

    async with rig.runtime(kubeconfig=rig.cluster.kubeconfig) as runtime:
        steps = rig.steps(runtime)
        await steps.step(await tracked())  # The launch: the worker is handed its grant.
        worker = labels.worker_pod_name(execution=name, generation=1)
        await pods.wait_for_phase(admin_api, namespace=namespace, name=worker, phase="Running")
        launched = await watching.execution(admin_api, namespace=namespace, name=name)
        assert launched["status"]["phase"] == "Running" and launched["status"]["hand"]["handed"] is True

        redis_server.stop()
        try:
            failed = await steps.step(await tracked())
        finally:
            redis_server.start()
        during = await watching.execution(admin_api, namespace=namespace, name=name)

        again = await steps.step(await tracked())
        after = await watching.execution(admin_api, namespace=namespace, name=name)
        registry = runtime.metrics.registry
        cleanup_failures = registry.get_sample_value(
            "agentihooks_swarm_cleanup_pass_failures_total", {"error": "StoreUnavailable"}
        )

    assert not failed.settled
    assert during["status"]["phase"] == "Running"
    found = conditions(during)
    assert "CleanedUp" not in found
    synced = found["Synced"]
    assert (synced["status"], synced["reason"]) == ("False", "StoreUnavailable")
    assert "could not read or record the attempt" in synced["message"] and "Redis" in synced["message"]
    assert cleanup_failures is None  # No cleanup pass ran, so none failed.
    assert not again.settled and after["status"]["phase"] == "Running"
    assert (conditions(after)["Synced"]["status"], conditions(after)["Synced"]["reason"]) == (
        "True",
        "Synced",
    )
    assert "CleanedUp" not in conditions(after)


async def _step_unread(rig: Rig, *, task: Any) -> tuple[step.Step, int, dict[str, Any]]:
    """One step of a new Execution of ``task`` while the API server never answers a read of it
    (through the proxy; its status and Events still go through): the step, the reads it tried,
    and the Execution after it."""
    name, namespace = "unread", rig.namespace
    body = builders.execution(name=name, namespace=namespace, swarm=SLUG)
    body["spec"]["task"] = task
    await watching.create(rig.api, body)
    tracked = executions.track(await watching.execution(rig.api, namespace=namespace, name=name))
    assert tracked is not None
    unanswered = rig.fault("timeout", method="GET", path=rf".*/executions/{name}")
    async with rig.runtime() as runtime:
        done = await rig.steps(runtime).step(tracked)
    return done, unanswered.hits, await watching.execution(rig.api, namespace=namespace, name=name)


async def test_a_task_too_large_is_invalid_even_when_its_execution_cannot_be_read_again(
    rig: Rig, swarm_crds: list[str]
) -> None:
    """The fuzz test's "string task too large": the table judged the spec the watch brought, so
    the step answers without reading the 1 MB object again (which a loaded API server may not
    answer within the API timeout: it was answered LaunchFailed)."""
    done, reads, after = await _step_unread(rig, task="x" * 1_000_001)
    assert done.settled and reads == 0
    assert after["status"]["phase"] == "Invalid"
    invalid = conditions(after)["Invalid"]
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidSpec")
    assert invalid["message"] == (
        f"Execution unread: spec.task takes 1000003 bytes as JSON, more than the {resources.MAX_TASK_BYTES} "
        "its grant ConfigMap can hold; hand the worker a reference to the data instead"
    )
    assert "Launched" not in conditions(after)


async def test_a_valid_spec_whose_execution_cannot_be_read_is_launch_failed_and_tried_again(
    rig: Rig, swarm_crds: list[str]
) -> None:
    """A spec too large for the table to keep is read at the launch; a read that fails is retried."""
    done, reads, after = await _step_unread(rig, task={"goal": "g" * executions.SPEC_KEPT})
    assert not done.settled and done.retry_after == work.LAUNCH_RETRY and reads == 1
    assert after["status"]["phase"] == "Pending"
    launched = conditions(after)["Launched"]
    assert (launched["status"], launched["reason"]) == ("False", "LaunchFailed")
    assert "read executions" in launched["message"] and "retrying every 10s" in launched["message"]
