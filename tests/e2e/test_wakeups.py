"""A change of a worker's Pod wakes its Execution's step, with the operator running as users run it.

The resync still comes for what a Pod change does not show, but an Execution whose worker runs is
stepped only by every sixth resync (parked): these tests show that a worker's end is acted on with
no resync at all, and that a running worker's Pod is not read on every resync.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentihooks_swarm.kubernetes import labels
from tests.support import pods
from tests.support.fixtures_scene import Scene
from tests.support.marked_workers import (
    SLUG,
    assert_one_capture_of_its_own,
    fail_worker,
    launch_marked,
    worker_pods,
)
from tests.support.proxy import FaultProxy


async def test_a_worker_that_fails_is_captured_and_done_with_no_resync(scene: Scene) -> None:
    """The resync is an hour away: only the worker Pods' watch can tell the operator it failed."""
    name = "woken"
    process = await launch_marked(
        scene,
        execution=name,
        env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "3600"},
        behaviour=pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="4s"),
    )
    await scene.until_phase(name, "Done", process=process, timeout=90)
    retained = await scene.stored(slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
    assert await worker_pods(scene.api, scene.namespace) == []


async def test_a_running_worker_is_parked_and_its_end_wakes_it(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, scene: Scene
) -> None:
    """With a resync every 0.5 s, a running worker's Pod was read twice a second; parked, it was
    read by every sixth resync (3 s); now the watch's view of it (running, every container
    running) answers the parked steps, and it is not read at all until it changes. Its failure
    is acted on at once."""
    name = "parked"
    pod = labels.worker_pod_name(execution=name, generation=1)
    process = await launch_marked(
        scene,
        execution=name,
        kubeconfig=fault_proxy_kubeconfig,
        env={"AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "0.5"},
        behaviour=pods.protocol_annotations(phase="Running"),
    )
    read = rf"/api/v1/namespaces/{scene.namespace}/pods/{pod}"

    async def running() -> bool:
        return (await scene.status(name)).get("phase") == "Running"

    await scene.until(running, what=f"{name} Running", process=process, timeout=60)
    await asyncio.sleep(1)  # The step that found it running has parked it.
    threaded_fault_proxy.reset_counts()
    await asyncio.sleep(6)
    reads = threaded_fault_proxy.count(method="GET", path=read)
    assert reads == 0, f"{reads} reads of the running worker's Pod in 6 s (12 without the watch)"

    await fail_worker(scene.api, namespace=scene.namespace, pod=pod, exit_code=3, reason="Error")

    await scene.until_phase(name, "Done", process=process)
    retained = await scene.stored(slug=SLUG, name="attempt-retained", execution=name)
    assert_one_capture_of_its_own(retained, execution=name, exit_code=3)
