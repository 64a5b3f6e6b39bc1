"""A change of a worker's Pod wakes its Execution's step, with the operator running as users run it.

The resync still comes for what a Pod change does not show, but an Execution whose worker runs is
stepped only by every sixth resync (parked): these tests show that a worker's end is acted on with
no resync at all, and that a running worker's Pod is not read on every resync.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kubernetes_asyncio import client

from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.marked_workers import (
    SLUG,
    assert_one_capture_of_its_own,
    fail_worker,
    plant_marker,
    worker_pods,
)
from tests.support.proxy import FaultProxy
from tests.support.watching import status_of, wait_done


async def test_a_worker_that_fails_is_captured_and_done_with_no_resync(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    """The resync is an hour away: only the worker Pods' watch can tell the operator it failed."""
    name = "woken"
    await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="4s")
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "3600"},
    )
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))

    await wait_done(admin_api, namespace, name, process, timeout=90)
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert await worker_pods(admin_api, namespace) == []


async def test_a_running_worker_is_parked_and_its_end_wakes_it(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
) -> None:
    """With a resync every 0.5 s, a running worker's Pod was read twice a second; parked, it is
    read by every sixth resync (3 s), and its failure is acted on at once."""
    name = "parked"
    pod = await plant_marker(control_plane, namespace=namespace, execution=name)
    behaviour = pods.protocol_annotations(phase="Running")
    process = operator(
        kubeconfig=fault_proxy_kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "0.5"},
    )
    await watching.create(admin_api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=SLUG))
    read = rf"/api/v1/namespaces/{namespace}/pods/{pod}"

    async def running_and_read() -> bool:
        return (await status_of(admin_api, namespace, name)).get(
            "phase"
        ) == "Running" and threaded_fault_proxy.count(method="GET", path=read) >= 1

    await watching.eventually(running_and_read, what=f"{name} Running", operator=process, timeout=60)
    await asyncio.sleep(1)  # The step that found it running has parked it.
    threaded_fault_proxy.reset_counts()
    await asyncio.sleep(6)
    reads = threaded_fault_proxy.count(method="GET", path=read)
    assert 1 <= reads <= 4, f"{reads} reads of the running worker's Pod in 6 s (12 without parking)"

    await fail_worker(admin_api, namespace=namespace, pod=pod, exit_code=3, reason="Error")

    await wait_done(admin_api, namespace, name, process)
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
