"""When a whole swarm fails the same way, with the operator running as users run it: refusals
grouped by fingerprint (one fingerprint for one cause, however many Pods), the Swarm's
``status.refusals`` and ``records top``, and a refusal budget that holds new Executions back until
the worker template changes."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import model
from tests.support import pods, watching
from tests.support.fixtures_scene import Scene
from tests.support.planting import as_the_operator_makes_it

SLUG = "broken"
CONFIG_MISSING = b"worker startup refused: /etc/agentihooks/grant/config.json missing\n"
REGISTRY_DOWN = b"worker startup refused: registry 10.0.0.7:5000 answered 503\n"


async def plant(
    scene: Scene, *, names: list[str], log: bytes, code: int, budget: dict[str, Any] | None = None
) -> None:
    """Before the operator runs: the Swarm (made once, registering ``registered`` only), an
    Execution of each name for a project outside it (its hand will be refused), and its worker Pod
    as a launch that stopped before recording its hand leaves it (owned by the Execution), all
    Failed with ``code`` and ``log``."""
    api, namespace = scene.api, scene.namespace
    try:
        await scene.swarm(name=SLUG, projects=["registered"], refusal_budget=budget)
    except client.ApiException as e:
        if e.status != 409:
            raise
    await launch(scene, names=names)
    await pods.plant_shared_log(
        cluster=scene.cluster,
        namespace=namespace,
        pods=[labels.worker_pod_name(execution=n, generation=1) for n in names],
        container="worker",
        content=log,
        share=f"code-{code}",
    )
    for name in names:
        uid = (await scene.get(name))["metadata"]["uid"]
        attempt = model.Attempt(namespace=namespace, slug=SLUG, execution=name, generation=1, owner_uid=uid)
        pod: Any = pods.worker_pod(
            name=attempt.pod_name,
            namespace=namespace,
            phase="Failed",
            exit_code=code,
            reason="Error",
            labels=attempt.labels,
            **as_the_operator_makes_it(attempt),
        )
        await client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    for name in names:
        pod_name = labels.worker_pod_name(execution=name, generation=1)
        await pods.wait_for_phase(api, namespace=namespace, name=pod_name, phase="Failed")


async def launch(scene: Scene, *, names: list[str]) -> None:
    """Executions for a project outside the registration: the hand is refused, the Pod captured."""
    for name in names:
        await scene.execution(name=name, swarm=SLUG, project="outside")


async def phase(scene: Scene, name: str) -> str | None:
    found = (await scene.status(name)).get("phase")
    return str(found) if found else None


async def swarm_status(scene: Scene) -> dict[str, Any]:
    found: dict[str, Any] = await client.CustomObjectsApi(scene.api).get_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", scene.namespace, "swarms", SLUG
    )
    return dict(found.get("status") or {})


async def test_thirty_refusals_of_one_cause_are_one_fingerprint_and_two_causes_two(scene: Scene) -> None:
    config = [f"cfg-{i:02d}" for i in range(30)]
    registry = [f"reg-{i:02d}" for i in range(5)]
    await plant(scene, names=config, log=CONFIG_MISSING, code=78)
    await plant(scene, names=registry, log=REGISTRY_DOWN, code=3)
    process = scene.start()

    async def all_done() -> bool:
        phases = await asyncio.gather(*(phase(scene, n) for n in [*config, *registry]))
        return all(p == "Done" for p in phases)

    await scene.until(all_done, what="every Execution Done", process=process, timeout=120)

    async def counted() -> dict[str, Any] | None:
        refusals = (await swarm_status(scene)).get("refusals") or {}
        return refusals if refusals.get("lastHour") == 35 else None

    refusals = await scene.until(counted, what="status.refusals", process=process)
    [first, second] = refusals["top"]
    assert (first["count"], first["class"]) == (30, "exit_code")
    assert first["text"] == "<time> worker startup refused: /etc/agentihooks/grant/config.json missing"
    assert first["example"] in config
    assert (second["count"], second["text"]) == (
        5,
        "<time> worker startup refused: registry <id>:<id> answered <id>",
    )
    assert first["fingerprint"] != second["fingerprint"]
    for name in (config[0], registry[0]):  # Each capture carries its fingerprint.
        record = await scene.stored(slug=SLUG, name="attempt-startup-diagnostics", execution=name)
        expected = first if name in config else second
        assert record["startup"]["fingerprint"] == expected["fingerprint"]
        assert record["startup"]["fingerprint_text"] == expected["text"]
    table = await scene.python("-m", "agentihooks_swarm", "records", "top", SLUG, check=False)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["COUNT", "FINGERPRINT", "CLASS"]
    assert [row.split()[:2] for row in rows] == [["30", first["fingerprint"]], ["5", second["fingerprint"]]]


async def test_the_budget_trips_at_its_count_holds_new_executions_and_a_new_template_releases_them(
    scene: Scene,
) -> None:
    first = ["b-1", "b-2", "b-3"]
    budget = {"maxRefusals": 3, "windowSeconds": 600, "sameFingerprint": True}
    await plant(scene, names=first, log=CONFIG_MISSING, code=78, budget=budget)
    process = scene.start()

    async def degraded() -> dict[str, Any] | None:
        conditions = (await swarm_status(scene)).get("conditions") or []
        found = next((c for c in conditions if c["type"] == "Degraded"), None)
        return found if found is not None and found["status"] == "True" else None

    condition = await scene.until(degraded, what="the Swarm Degraded", process=process, timeout=60)
    assert condition["reason"] == "RefusalBudgetExceeded"
    assert "3 refused worker Pods" in condition["message"] and "config.json missing" in condition["message"]
    await scene.events_once(SLUG, reasons={"RefusalBudgetExceeded"}, process=process)

    # A new Execution is held back: Blocked, and no Pod is created for it.
    await launch(scene, names=["after"])
    status = await scene.until_phase("after", "Blocked", process=process, timeout=30)
    [launched] = [c for c in status["conditions"] if c["type"] == "Launched"]
    assert launched["reason"] == "RefusalBudgetExceeded" and "config.json missing" in launched["message"]
    await asyncio.sleep(3)  # A few resyncs: still held back.
    assert await phase(scene, "after") == "Blocked"
    assert not await watching.pod_exists(
        scene.api, namespace=scene.namespace, name=labels.worker_pod_name(execution="after", generation=1)
    )

    # A new worker template releases it.
    await watching.merge_patch(
        scene.api,
        namespace=scene.namespace,
        plural="swarms",
        name=SLUG,
        body={"spec": {"worker": {"env": [{"name": "FIXED", "value": "1"}]}}},
    )

    async def released() -> str | None:
        found = await phase(scene, "after")
        return found if found in ("Refused", "Done") else None

    await scene.until(released, what="the Execution launched", process=process, timeout=60)

    async def recovered() -> bool:
        conditions = (await swarm_status(scene)).get("conditions") or []
        return any(c["type"] == "Degraded" and c["status"] == "False" for c in conditions)

    await scene.until(recovered, what="the Swarm no longer Degraded", process=process)
