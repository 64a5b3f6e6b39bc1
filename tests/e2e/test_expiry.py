"""Finished Executions expire (``spec.ttlSecondsAfterFinished``, else the operator's default), on the
real API server with the operator running; their records stay, and the spec's read commands and
the records CLI answer for them after the Execution is gone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support import builders, planting, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.operator_process import OperatorProcess
from tests.support.read_commands import READ_RETAINED, READ_STARTUP

PLANTED = planting.PLANTED
SLUG = "expiry"


async def _exists(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        await watching.execution(api, namespace=namespace, name=name)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


async def _gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    return not await _exists(api, namespace, name)


async def _status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (await watching.execution(api, namespace=namespace, name=name)).get(
        "status"
    ) or {}
    return found


async def _done(api: client.ApiClient, namespace: str, name: str, process: OperatorProcess) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        status = await _status(api, namespace, name)
        return status if status.get("phase") == "Done" else None

    return await watching.eventually(probe, what=f"{name} to be Done", operator=process, timeout=60)


async def _refused_at_launch(
    api: client.ApiClient, cluster: ControlPlane, *, namespace: str, execution: str, ttl: int | None
) -> None:
    """A planted Failed worker Pod, then an Execution whose hand is refused: launch removal captures."""
    await planting.plant_refused_worker(api, cluster, namespace=namespace, slug=SLUG, execution=execution)
    await watching.create(
        api,
        builders.execution(
            name=execution, namespace=namespace, swarm=SLUG, project="outside-the-registration", ttl=ttl
        ),
    )


async def _logged(process: OperatorProcess, line: str) -> bool:
    return line in process.log()


def _run(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={"AGENTIHOOKS_SWARM_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )


async def test_a_done_execution_expires_and_its_records_still_answer(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"]))
    await _refused_at_launch(admin_api, control_plane, namespace=namespace, execution="short-lived", ttl=2)

    status = await _done(admin_api, namespace, "short-lived", process)
    assert status["hand"] == {"handed": False, "reason": "project_unpermitted", "removed": True}
    assert status["finishedAt"].endswith("Z")
    await watching.eventually(
        lambda: _gone(admin_api, namespace, "short-lived"),
        what="the expired Execution to be deleted",
        operator=process,
    )
    await watching.eventually(
        lambda: _logged(process, "expired (ttlSecondsAfterFinished), deleted"),
        what="the expiry in the log",
        operator=process,
    )

    # Launch removal's capture, with the spec's read command, after the Execution is gone.
    read = await asyncio.to_thread(_run, redis_url, "-c", READ_STARTUP, SLUG, "short-lived")
    record = json.loads(read.stdout)
    [container] = record["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    assert container["log"].endswith(" worker startup refused: planted kind refusal\n")
    # The retained cleanup evidence, with the spec's read command and with the records CLI.
    retained = await asyncio.to_thread(_run, redis_url, "-c", READ_RETAINED, SLUG, "short-lived")
    assert json.loads(retained.stdout) == []  # Launch removal had removed the only Pod already.
    final = await asyncio.to_thread(
        _run, redis_url, "-m", "agentihooks_swarm", "records", "final", SLUG, "short-lived"
    )
    assert json.loads(final.stdout)["state"] == "refused"
    full = await asyncio.to_thread(
        _run, redis_url, "-m", "agentihooks_swarm", "records", "retained", SLUG, "short-lived", "--full"
    )
    assert set(json.loads(full.stdout)) == {"execution", "final", "watermark", "archived", "removed"}


async def test_the_default_ttl_applies_unless_the_spec_sets_one(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_TTL_SECONDS_AFTER_FINISHED": "1"},
    )
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"]))
    for name, ttl in (("by-default", None), ("kept-long", 3600)):
        await watching.create(
            admin_api,
            builders.execution(name=name, namespace=namespace, swarm=SLUG, project="elsewhere", ttl=ttl),
        )
    await _done(admin_api, namespace, "kept-long", process)
    await watching.eventually(
        lambda: _gone(admin_api, namespace, "by-default"),
        what="the default TTL to expire it",
        operator=process,
    )
    await asyncio.sleep(2)
    assert await _exists(admin_api, namespace, "kept-long")


async def test_without_a_ttl_done_executions_stay_and_deleting_one_is_not_blocked(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"]))
    await watching.create(
        admin_api, builders.execution(name="forever", namespace=namespace, swarm=SLUG, project="elsewhere")
    )
    await _done(admin_api, namespace, "forever", process)
    await asyncio.sleep(2)
    body = await watching.execution(admin_api, namespace=namespace, name="forever")
    assert not body["metadata"].get("finalizers")  # The operator's went when its cleanup was done.

    await client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions", "forever"
    )
    await watching.eventually(
        lambda: _gone(admin_api, namespace, "forever"),
        what="the deleted Done Execution to go",
        operator=process,
    )


async def test_a_done_execution_of_an_earlier_version_goes_without_its_kopf_finalizer(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    """An earlier version ran the delete handler in kopf: its Done Executions still carry kopf's
    finalizer, which no kopf removes now. Deleting one still goes through."""
    kopf_finalizer = "kopf.zalando.org/KopfFinalizerMarker"
    manifest = builders.execution(name="older", namespace=namespace, swarm=SLUG, project="elsewhere")
    manifest["metadata"]["finalizers"] = [kopf_finalizer]
    await watching.create(admin_api, manifest)
    await watching.merge_patch(
        admin_api,
        namespace=namespace,
        plural="executions",
        name="older",
        body={
            "status": {
                "phase": "Done",
                "attempt": 1,
                "pod": "swarm-worker-older-1",
                "hand": {"handed": False},
            }
        },
        status=True,
    )
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions", "older"
    )
    await watching.eventually(lambda: _gone(admin_api, namespace, "older"), what="it to go", operator=process)
    await watching.eventually(
        lambda: _logged(process, f"finalizers {kopf_finalizer} removed"), what="the release", operator=process
    )


# Among the slowest tests: the operator stays stopped past the Execution's 4 s TTL (to show nobody
# expired it meanwhile), then starts again, a second operator start.
async def test_a_restarted_operator_expires_what_finished_while_it_was_away(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"]))
    await watching.create(
        admin_api,
        builders.execution(name="outlived", namespace=namespace, swarm=SLUG, project="elsewhere", ttl=4),
    )
    await _done(admin_api, namespace, "outlived", process)
    process.stop()
    await asyncio.sleep(5)
    assert await _exists(admin_api, namespace, "outlived")  # Nobody expired it while stopped.

    process.start()
    await watching.eventually(
        lambda: _gone(admin_api, namespace, "outlived"), what="the restart to expire it", operator=process
    )
    await watching.eventually(
        lambda: _logged(process, "1 Done executions listed, 1 of them expire;"),
        what="the restart's list of Done executions",
        operator=process,
    )
