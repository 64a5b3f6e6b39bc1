"""When a whole swarm fails the same way, with the operator running as users run it: refusals
grouped by fingerprint (one fingerprint for one cause, however many Pods), the Swarm's
``status.refusals`` and ``records top``, and a refusal budget that holds new Executions back until
the worker template changes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory

SLUG = "broken"
CONFIG_MISSING = b"worker startup refused: /etc/agentihooks/grant/config.json missing\n"
REGISTRY_DOWN = b"worker startup refused: registry 10.0.0.7:5000 answered 503\n"


async def plant(
    api: client.ApiClient, cluster: ControlPlane, *, namespace: str, names: list[str], log: bytes, code: int
) -> None:
    """Refused workers under the names launches adopt, all Failed with ``code`` and ``log``."""
    await pods.plant_shared_log(
        cluster=cluster,
        namespace=namespace,
        pods=[labels.worker_pod_name(execution=n, generation=1) for n in names],
        container="worker",
        content=log,
        share=f"code-{code}",
    )
    for name in names:
        pod: Any = pods.worker_pod(
            name=labels.worker_pod_name(execution=name, generation=1),
            namespace=namespace,
            phase="Failed",
            exit_code=code,
            reason="Error",
            labels=labels.attempt(slug=SLUG, execution=name, generation=1),
        )
        await client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    for name in names:
        pod_name = labels.worker_pod_name(execution=name, generation=1)
        await pods.wait_for_phase(api, namespace=namespace, name=pod_name, phase="Failed")


async def launch(api: client.ApiClient, *, namespace: str, names: list[str]) -> None:
    """Executions for a project outside the registration: the hand is refused, the Pod captured."""
    for name in names:
        await watching.create(
            api, builders.execution(name=name, namespace=namespace, swarm=SLUG, project="outside")
        )


async def phase(api: client.ApiClient, namespace: str, name: str) -> str | None:
    status = (await watching.execution(api, namespace=namespace, name=name)).get("status") or {}
    found = status.get("phase")
    return str(found) if found else None


async def swarm_status(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "swarms", SLUG
    )
    return dict(found.get("status") or {})


def top(redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTIHOOKS_SWARM_REDIS_URL": redis_url}
    return subprocess.run(
        [sys.executable, "-m", "agentihooks_swarm", "records", "top", SLUG],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


async def test_thirty_refusals_of_one_cause_are_one_fingerprint_and_two_causes_two(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    config = [f"cfg-{i:02d}" for i in range(30)]
    registry = [f"reg-{i:02d}" for i in range(5)]
    await plant(admin_api, control_plane, namespace=namespace, names=config, log=CONFIG_MISSING, code=78)
    await plant(admin_api, control_plane, namespace=namespace, names=registry, log=REGISTRY_DOWN, code=3)
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"]))
    await launch(admin_api, namespace=namespace, names=[*config, *registry])

    async def all_done() -> bool:
        phases = await asyncio.gather(*(phase(admin_api, namespace, n) for n in [*config, *registry]))
        return all(p == "Done" for p in phases)

    await watching.eventually(all_done, what="every Execution Done", operator=process, timeout=120)

    async def counted() -> dict[str, Any] | None:
        refusals = (await swarm_status(admin_api, namespace)).get("refusals") or {}
        return refusals if refusals.get("lastHour") == 35 else None

    refusals = await watching.eventually(counted, what="status.refusals", operator=process)
    [first, second] = refusals["top"]
    assert (first["count"], first["class"]) == (30, "exit_code")
    assert first["text"] == "<time> worker startup refused: /etc/agentihooks/grant/config.json missing"
    assert first["example"] in config
    assert (second["count"], second["text"]) == (
        5,
        "<time> worker startup refused: registry <ip>:<n> answered <n>",
    )
    assert first["fingerprint"] != second["fingerprint"]
    for name in (config[0], registry[0]):  # Each capture carries its fingerprint.
        record = await watching.stored(
            redis_url, slug=SLUG, name="attempt-startup-diagnostics", execution=name
        )
        expected = first if name in config else second
        assert record["startup"]["fingerprint"] == expected["fingerprint"]
        assert record["startup"]["fingerprint_text"] == expected["text"]
    table = top(redis_url)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["COUNT", "FINGERPRINT", "CLASS"]
    assert [row.split()[:2] for row in rows] == [["30", first["fingerprint"]], ["5", second["fingerprint"]]]


async def test_the_budget_trips_at_its_count_holds_new_executions_and_a_new_template_releases_them(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    first = ["b-1", "b-2", "b-3"]
    await plant(admin_api, control_plane, namespace=namespace, names=first, log=CONFIG_MISSING, code=78)
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    swarm = builders.swarm(name=SLUG, namespace=namespace, projects=["registered"])
    swarm["spec"]["refusalBudget"] = {"maxRefusals": 3, "windowSeconds": 600, "sameFingerprint": True}
    await watching.create(admin_api, swarm)
    await launch(admin_api, namespace=namespace, names=first)

    async def degraded() -> dict[str, Any] | None:
        conditions = (await swarm_status(admin_api, namespace)).get("conditions") or []
        found = next((c for c in conditions if c["type"] == "Degraded"), None)
        return found if found is not None and found["status"] == "True" else None

    condition = await watching.eventually(degraded, what="the Swarm Degraded", operator=process, timeout=60)
    assert condition["reason"] == "RefusalBudgetExceeded"
    assert "3 refused worker Pods" in condition["message"] and "config.json missing" in condition["message"]
    await watching.events_once(
        admin_api, namespace=namespace, name=SLUG, reasons={"RefusalBudgetExceeded"}, operator=process
    )

    # A new Execution is held back: Blocked, and no Pod is created for it.
    await launch(admin_api, namespace=namespace, names=["after"])

    async def blocked() -> dict[str, Any] | None:
        status = (await watching.execution(admin_api, namespace=namespace, name="after")).get("status") or {}
        return status if status.get("phase") == "Blocked" else None

    status = await watching.eventually(blocked, what="the new Execution Blocked", operator=process)
    [launched] = [c for c in status["conditions"] if c["type"] == "Launched"]
    assert launched["reason"] == "RefusalBudgetExceeded" and "config.json missing" in launched["message"]
    await asyncio.sleep(3)  # A few resyncs: still held back.
    assert await phase(admin_api, namespace, "after") == "Blocked"
    assert not await watching.pod_exists(
        admin_api, namespace=namespace, name=labels.worker_pod_name(execution="after", generation=1)
    )

    # A new worker template releases it.
    await watching.merge_patch(
        admin_api,
        namespace=namespace,
        plural="swarms",
        name=SLUG,
        body={"spec": {"worker": {"env": [{"name": "FIXED", "value": "1"}]}}},
    )

    async def released() -> str | None:
        found = await phase(admin_api, namespace, "after")
        return found if found in ("Refused", "Done") else None

    await watching.eventually(released, what="the Execution launched", operator=process, timeout=60)

    async def recovered() -> bool:
        conditions = (await swarm_status(admin_api, namespace)).get("conditions") or []
        return any(c["type"] == "Degraded" and c["status"] == "False" for c in conditions)

    await watching.eventually(recovered, what="the Swarm no longer Degraded", operator=process)
