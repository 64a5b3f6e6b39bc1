"""Every background task under the supervisor, on the real API server (through the fault proxy)
and the real Redis: an unexpected error in a task (an answer of a shape nobody expected, injected
by the proxy) is followed by a restart, counted per task, and cleanup goes on afterwards."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from kubernetes_asyncio import client

from agentihooks_swarm import app as app_, settings as settings_
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.storage import operations
from tests.support import app_tasks, builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.proxy import FaultProxy, Respond

SLUG = "supervised"
PLANTED = b"worker startup refused: supervised\n"


@contextlib.asynccontextmanager
async def running(kubeconfig: Path, store: operations.AsyncStore, namespace: str) -> AsyncIterator[app_.App]:
    """The operator's tasks (all but kopf's), wired as ``run`` wires them, on the test's services."""
    settings = settings_.Settings(
        namespace=namespace,
        cleanup_interval_seconds=0.5,
        lease_duration_seconds=6,
        api_timeout_seconds=3,
        # The test workers' kwok annotations are a prefixed key the worker policy must allow.
        worker_metadata_prefixes=pods.PREFIX,
    )
    async with app_tasks.running(
        kubeconfig=kubeconfig, store=store, settings=settings, identity="supervised-test", backoff_seconds=0.2
    ) as app:
        yield app


def restarts(app: app_.App, task: str) -> float:
    found = app.metrics.registry.get_sample_value("agentihooks_swarm_task_restarts_total", {"task": task})
    return 0.0 if found is None else found


async def until(what: str, check: Callable[[], bool], *, seconds: float = 30.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds}s: {what}")


async def test_each_task_restarts_after_an_unexpected_error_and_cleanup_goes_on(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    store: operations.AsyncStore,
) -> None:
    # About 20 s: the Lease's fault waits for the next renewal, and each restart waits out the
    # supervisor's backoff before the task runs again.
    # Answers of a shape nobody expects: a list whose items are not a list, a Lease whose spec is
    # not an object. Each ends its task with an error the task does not handle.
    executions = f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/executions"
    events = f"/api/v1/namespaces/{namespace}/events"
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/agentihooks-swarm-controller"
    broken = Respond(status=200, body={"kind": "List", "items": 5, "metadata": {"resourceVersion": "1"}})
    fault_proxy.add_rule(method="GET", path=executions, query=r"limit=", action=broken, times=1)
    fault_proxy.add_rule(method="GET", path=events, query=r"limit=", action=broken, times=1)
    async with running(proxy_kubeconfig, store, namespace) as app:
        await until("both watches restarted and listed", lambda: all(app.synced().values()))
        assert restarts(app, "watch executions") == 1 and restarts(app, "watch pod events") == 1
        fault_proxy.add_rule(
            method="GET", path=lease, action=Respond(status=200, body={"spec": "x"}), times=1
        )
        await until("the Lease renewal restarted", lambda: restarts(app, "leadership") == 1, seconds=20)
        await until("leading again", app.leader.holds, seconds=20)

        # A step that meets an unexpected answer (the worker Pod's create answers something that
        # is not an object, and creates nothing) is counted and tried again; the workers go on,
        # and so does the Execution's cleanup.
        name = "after-faults"
        pod = labels.worker_pod_name(execution=name, generation=1)
        await pods.plant_log(
            cluster=control_plane, namespace=namespace, pod=pod, container="worker", content=PLANTED
        )
        behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="1s")
        await watching.create(
            admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour)
        )
        fault_proxy.add_rule(
            method="POST",
            path=f"/api/v1/namespaces/{namespace}/pods",
            action=Respond(status=200, body=b"[]"),
            times=2,
        )
        await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

        async def done() -> bool:
            status = (await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {}
            return status.get("phase") == "Done"

        await watching.eventually(done, what=f"{name} Done after the faults", timeout=60)
        errors = app.metrics.registry.get_sample_value("agentihooks_swarm_steps_total", {"result": "error"})
        assert errors is not None and errors >= 1
        assert app.supervisor.healthy and all(app.supervisor.running().values())
    retained = await store.read_retained(slug=SLUG, execution=name)
    assert retained is not None
    [entry] = retained.removed.pods
    assert entry.startup is not None and (entry.startup.containers[0].log or "").endswith(PLANTED.decode())
