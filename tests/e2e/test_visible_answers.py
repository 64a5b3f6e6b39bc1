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
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory

GROUP, VERSION = "swarm.agentihooks.io", "v1alpha1"


async def _condition(api: client.ApiClient, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
    status = (await watching.execution(api, namespace=namespace, name=name)).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


async def _refused(api: client.ApiClient, body: dict[str, Any]) -> tuple[int, str]:
    """The API server's refusal of ``body``: its status and its message."""
    with pytest.raises(client.ApiException) as refused:
        await watching.create(api, body)
    return int(refused.value.status), str(refused.value.body)


async def _quiet(api: client.ApiClient, *, namespace: str, name: str, seconds: float) -> bool:
    """Whether the Execution is left alone (no retry writes its progress or status) for ``seconds``."""
    before = (await watching.execution(api, namespace=namespace, name=name))["metadata"]["resourceVersion"]
    await asyncio.sleep(seconds)
    after = (await watching.execution(api, namespace=namespace, name=name))["metadata"]["resourceVersion"]
    return bool(before == after)


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


async def test_a_pod_the_api_server_refuses_is_a_visible_permanent_answer(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    swarm = builders.swarm(name="bad", namespace=namespace)
    # Valid for the CRD (securityContext is the Pod's own, passed through), refused by Pod validation.
    swarm["spec"]["worker"]["securityContext"] = {"runAsUser": -1}
    await watching.create(admin_api, swarm)
    await watching.create(admin_api, builders.execution(name="e1", namespace=namespace, swarm="bad"))

    invalid = await watching.eventually(
        lambda: _condition(admin_api, namespace, "e1", "Invalid"),
        what="the Invalid condition",
        operator=process,
    )
    pod = labels.worker_pod_name(execution="e1", generation=1)
    assert (invalid["status"], invalid["reason"]) == ("True", "PodRejected")
    assert f"Pod {namespace}/{pod}" in invalid["message"]
    assert "runAsUser" in invalid["message"]  # The API server's own words.
    status = (await watching.execution(admin_api, namespace=namespace, name="e1"))["status"]
    assert status["phase"] == "Invalid"
    found = await watching.events_once(
        admin_api, namespace=namespace, name="e1", reasons={"PodRejected"}, operator=process
    )
    seen = [m for _, r, m in found if r == "PodRejected"]
    assert seen and "runAsUser" in seen[0]
    assert not await watching.pod_exists(admin_api, namespace=namespace, name=pod)
    assert await _quiet(admin_api, namespace=namespace, name="e1", seconds=4), "the operator kept retrying"

    # Fixing the Swarm is the change that launches it again.
    answered, _ = await asyncio.to_thread(
        control_plane.request,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/swarms/bad",
        {"spec": {"worker": {"securityContext": {"runAsUser": 1000}}}},
        content_type="application/merge-patch+json",
    )
    assert answered == 200
    await watching.eventually(
        lambda: _phase(admin_api, namespace, "e1", "Running"),
        what="the relaunch",
        operator=process,
        timeout=30,
    )
    assert await watching.pod_exists(admin_api, namespace=namespace, name=pod)
    assert process.running


async def test_a_large_task_launches_and_no_copy_of_it_is_kept_on_the_execution(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name="big", namespace=namespace))
    # Over the 256 KiB annotation limit, under the task bound: it launches, and stays quiet.
    task = {"goal": "x" * (300 * 1024)}
    await watching.create(
        admin_api, builders.execution(name="big", namespace=namespace, swarm="big", task=task)
    )
    handed = await watching.eventually(
        lambda: _condition(admin_api, namespace, "big", "Handed"),
        what="the hand",
        operator=process,
        timeout=30,
    )
    assert handed["status"] == "True"
    await watching.eventually(
        lambda: _condition(admin_api, namespace, "big", "Recorded"), what="the record", operator=process
    )
    found = await watching.execution(admin_api, namespace=namespace, name="big")
    annotations = found["metadata"].get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 16 * 1024
    # No bookkeeping copies the spec: the status holds what the steps say, a few KiB at most.
    assert len(json.dumps(found["status"])) < 16 * 1024
    assert "Too long" not in process.log()


async def test_a_task_too_large_for_its_grant_is_invalid_before_anything_is_created(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name="big", namespace=namespace))
    # The CRD cannot bound a field without a type (CEL does not see it): the operator measures it.
    task = {"goal": "x" * (1024 * 1024)}
    await watching.create(
        admin_api, builders.execution(name="obj", namespace=namespace, swarm="big", task=task)
    )
    invalid = await watching.eventually(
        lambda: _condition(admin_api, namespace, "obj", "Invalid"),
        what="the Invalid condition",
        operator=process,
    )
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidSpec")
    assert "spec.task" in invalid["message"]
    status = (await watching.execution(admin_api, namespace=namespace, name="obj"))["status"]
    assert status["phase"] == "Invalid"
    assert not await watching.pod_exists(
        admin_api, namespace=namespace, name=labels.worker_pod_name(execution="obj", generation=1)
    )
    assert await _quiet(admin_api, namespace=namespace, name="obj", seconds=3)
    assert "Too long" not in process.log()


async def _phase(api: client.ApiClient, namespace: str, name: str, phase: str) -> bool:
    status = (await watching.execution(api, namespace=namespace, name=name)).get("status") or {}
    return bool(status.get("phase") == phase)
