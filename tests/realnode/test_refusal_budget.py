"""A swarm whose image cannot be pulled, on the real node: its workers never start, its startup
deadline makes the kubelet fail them, each is captured, and its refusal budget trips; the Swarm's
status names the pull error, and the next Execution waits (Blocked)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from tests.support import builders, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory

SLUG = "unpullable"
#: An image no registry serves: this machine reaches none, and localhost:1 refuses at once.
IMAGE = "localhost:1/agentihooks/none:1"


async def test_an_image_that_cannot_be_pulled_trips_the_budget_and_the_status_names_the_pull_error(
    admin_api: client.ApiClient, control_plane: ControlPlane, namespace: str, operator: OperatorFactory
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    swarm = builders.swarm(name=SLUG, namespace=namespace, image=IMAGE, startup_deadline_seconds=5)
    swarm["spec"]["refusalBudget"] = {"maxRefusals": 2, "windowSeconds": 600, "sameFingerprint": True}
    await watching.create(admin_api, swarm)
    for name in ("pull-1", "pull-2"):
        await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    async def degraded() -> dict[str, Any] | None:
        found: dict[str, Any] = await client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
            "swarm.agentihooks.io", "v1alpha1", namespace, "swarms", SLUG
        )
        status = found.get("status") or {}
        condition = next((c for c in status.get("conditions") or [] if c["type"] == "Degraded"), None)
        return status if condition is not None and condition["status"] == "True" else None

    status = await watching.eventually(degraded, what="the budget to trip", operator=process, timeout=180)
    [top] = status["refusals"]["top"]
    assert (top["count"], top["class"]) == (2, "image_pull")
    assert "ErrImagePull" in top["text"] or "ImagePullBackOff" in top["text"], top
    [condition] = [c for c in status["conditions"] if c["type"] == "Degraded"]
    assert condition["reason"] == "RefusalBudgetExceeded" and "ImagePull" in condition["message"]

    await watching.create(admin_api, builders.execution(name="pull-3", namespace=namespace, swarm=SLUG))

    async def blocked() -> bool:
        found = (await watching.execution(admin_api, namespace=namespace, name="pull-3")).get("status") or {}
        return found.get("phase") == "Blocked"

    await watching.eventually(blocked, what="the next Execution Blocked", operator=process, timeout=60)
