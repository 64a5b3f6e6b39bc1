"""Issue 13: every bad Swarm or Execution gets a visible answer, with the operator running.

Each test reproduces one report of the issue on the local cluster: a worker template the API
server refuses, and a task too large for kopf's bookkeeping annotations. The answer is either a
refusal at admission with a message that says what to fix, or a phase and a condition on the
Execution; never a silent retry loop.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, watching
from tests.support.fixtures_scene import Scene
from tests.support.operator_process import OperatorProcess

GROUP, VERSION = "swarm.agentihooks.io", "v1alpha1"


async def _refused(api: client.ApiClient, body: dict[str, Any]) -> tuple[int, str]:
    """The API server's refusal of ``body``: its status and its message."""
    with pytest.raises(client.ApiException) as refused:
        await watching.create(api, body)
    return int(refused.value.status), str(refused.value.body)


async def _quiet(scene: Scene, name: str, *, seconds: float) -> bool:
    """Whether the Execution is left alone (no retry writes its progress or status) for ``seconds``."""
    before = (await scene.get(name))["metadata"]["resourceVersion"]
    await asyncio.sleep(seconds)
    after = (await scene.get(name))["metadata"]["resourceVersion"]
    return bool(before == after)


async def _invalid(scene: Scene, name: str, *, process: OperatorProcess) -> dict[str, Any]:
    """Execution ``name``'s Invalid condition, once it has one; the Execution is Invalid."""
    invalid = await scene.until(
        lambda: scene.condition(name, "Invalid"), what="the Invalid condition", process=process
    )
    assert (await scene.status(name))["phase"] == "Invalid"
    return invalid


async def test_a_quantity_that_is_not_one_is_refused_at_admission(
    admin_api: client.ApiClient, namespace: str, swarm_crds: list[str]
) -> None:
    body = builders.swarm(name="bad", namespace=namespace)
    body["spec"]["worker"]["resources"] = {"limits": {"memory": "nonsense"}}
    status, message = await _refused(admin_api, body)
    assert status == 422
    assert "spec.worker.resources.limits.memory" in message
    assert "values are quantities" in message


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"memory": "+.5e+934836646"}},
        {"limits": {"cpu": "1e+999999999"}},
        {"requests": {"memory": "1e+999999999"}, "limits": {"memory": "+.5e+934836646"}},
    ],
    ids=["request", "limit", "request-and-limit"],
)
async def test_a_quantity_with_a_huge_exponent_is_refused_at_once(
    admin_api: client.ApiClient, namespace: str, swarm_crds: list[str], resources: dict[str, Any]
) -> None:
    """The API server's quantity() spends minutes on such an exponent: found by the fuzz test
    (seed 3110253299) as a 504 after 34 s. The rules test the pattern first."""
    body = builders.swarm(name="huge", namespace=namespace)
    body["spec"]["worker"]["resources"] = resources
    status, message = await _refused(admin_api, body)
    assert status == 422, message  # Not the 504 of the API server's 34 s request timeout.
    assert "spec.worker.resources" in message and "should match" in message


async def test_a_pod_the_api_server_refuses_is_a_visible_permanent_answer(scene: Scene) -> None:
    process = scene.start()
    swarm = builders.swarm(name="bad", namespace=scene.namespace)
    # Valid for the CRD (securityContext is the Pod's own, passed through), refused by Pod validation.
    swarm["spec"]["worker"]["securityContext"] = {"runAsUser": -1}
    await watching.create(scene.api, swarm)
    await scene.execution(name="e1", swarm="bad")

    invalid = await _invalid(scene, "e1", process=process)
    pod = labels.worker_pod_name(execution="e1", generation=1)
    assert (invalid["status"], invalid["reason"]) == ("True", "PodRejected")
    assert f"Pod {scene.namespace}/{pod}" in invalid["message"]
    assert "runAsUser" in invalid["message"]  # The API server's own words.
    found = await scene.events_once("e1", reasons={"PodRejected"}, process=process)
    seen = [m for _, r, m in found if r == "PodRejected"]
    assert seen and "runAsUser" in seen[0]
    assert not await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod)
    assert await _quiet(scene, "e1", seconds=4), "the operator kept retrying"

    # Fixing the Swarm is the change that launches it again.
    answered, _ = await asyncio.to_thread(
        scene.cluster.request,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{scene.namespace}/swarms/bad",
        {"spec": {"worker": {"securityContext": {"runAsUser": 1000}}}},
        content_type="application/merge-patch+json",
    )
    assert answered == 200
    await scene.until_phase("e1", "Running", process=process, timeout=30)
    assert await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod)
    assert process.running


async def test_a_large_task_launches_and_no_copy_of_it_is_kept_on_the_execution(scene: Scene) -> None:
    process = scene.start()
    await scene.swarm(name="big")
    # Over the 256 KiB annotation limit, under the task bound: it launches, and stays quiet.
    await scene.execution(name="big", swarm="big", task={"goal": "x" * (300 * 1024)})
    handed = await scene.until(
        lambda: scene.condition("big", "Handed"), what="the hand", process=process, timeout=30
    )
    assert handed["status"] == "True"
    await scene.until(lambda: scene.condition("big", "Recorded"), what="the record", process=process)
    found = await scene.get("big")
    annotations = found["metadata"].get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 16 * 1024
    # No bookkeeping copies the spec: the status holds what the steps say, a few KiB at most.
    assert len(json.dumps(found["status"])) < 16 * 1024
    assert "Too long" not in process.log()


async def test_a_task_too_large_for_its_grant_is_invalid_before_anything_is_created(scene: Scene) -> None:
    process = scene.start()
    await scene.swarm(name="big")
    # The CRD cannot bound a field without a type (CEL does not see it): the operator measures it.
    await scene.execution(name="obj", swarm="big", task={"goal": "x" * (1024 * 1024)})
    invalid = await _invalid(scene, "obj", process=process)
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidSpec")
    assert "spec.task" in invalid["message"]
    assert not await watching.pod_exists(
        scene.api, namespace=scene.namespace, name=labels.worker_pod_name(execution="obj", generation=1)
    )
    assert await _quiet(scene, "obj", seconds=3)
    assert "Too long" not in process.log()
