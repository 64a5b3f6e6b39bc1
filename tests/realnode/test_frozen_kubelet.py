"""A node whose kubelet stops answering for a while (a kubelet restart, a frozen node, a network
blip) costs no log: with the chart's defaults (cleanup interval 10 s, API timeout 10 s) the
operator keeps the refused worker while the kubelet is frozen (SIGSTOP) for 90 s, and captures
its log once the kubelet answers again.

Before, the three counted log reads failed 20 s apart and the Pod was deleted with exit reasons
only at 60 s: a read that fails because the node did not answer now counts only 10 s, 60 s and
300 s after the first failure.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator

import pytest

from agentihooks_swarm.kubernetes import labels
from tests.support import pods, watching
from tests.support.busybox import run_script
from tests.support.cluster import ControlPlane, control_plane as cp
from tests.support.cluster.processes import Child
from tests.support.fixtures_scene import Scene

SLUG = "frozen"
CHART_DEFAULTS = {
    "AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "10",
    "AGENTIHOOKS_SWARM_API_TIMEOUT_SECONDS": "10",
}
FROZEN_SECONDS = 90
NODE_BACK_SECONDS = 120


@pytest.fixture
async def kubelet(control_plane: ControlPlane) -> AsyncIterator[Child]:
    """The session's kubelet, thawed afterwards and waited for: after a freeze the node controller
    has marked the node NotReady and tainted it, and the next test's Pods would be unschedulable
    until the thawed kubelet's status lifts that."""
    [kubelet] = [c for c in control_plane.children if c.name == "kubelet"]
    yield kubelet
    os.kill(kubelet.pid, signal.SIGCONT)
    deadline = time.monotonic() + NODE_BACK_SECONDS
    while not await asyncio.to_thread(cp.node_ready, control_plane):
        assert time.monotonic() < deadline, f"node not Ready {NODE_BACK_SECONDS}s after the thaw"
        await asyncio.sleep(1)


async def test_a_frozen_kubelet_keeps_the_refused_worker_until_its_log_is_captured(
    kubelet: Child, scene: Scene
) -> None:
    admin_api, namespace = scene.api, scene.namespace
    script = "echo 'worker: grant taken'; sleep 5; echo 'worker: refused after a frozen node' >&2; exit 78"
    process = await run_script(scene, swarm=SLUG, execution="thaws", script=script, env=CHART_DEFAULTS)

    async def handed() -> bool:
        status = (await watching.execution(admin_api, namespace=namespace, name="thaws")).get("status") or {}
        return bool((status.get("hand") or {}).get("handed"))

    await watching.eventually(handed, what="the hand", operator=process, timeout=60)
    # The operator stops while the worker runs, so that nothing reads the worker's log before the
    # node is frozen; it starts again once the kubelet has reported the failure and is frozen.
    process.stop()
    name = labels.worker_pod_name(execution="thaws", generation=1)
    await pods.wait_for_phase(admin_api, namespace=namespace, name=name, phase="Failed", timeout=90)
    os.kill(kubelet.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        process.start()
        while time.monotonic() - frozen_at < FROZEN_SECONDS:
            assert await watching.pod_exists(admin_api, namespace=namespace, name=name), (
                f"deleted {time.monotonic() - frozen_at:.0f}s into the freeze:\n{process.tail(40)}"
            )
            await asyncio.sleep(2)
    finally:
        os.kill(kubelet.pid, signal.SIGCONT)
    assert "node_unreachable" in process.log() or "timeout" in process.log()  # It did try, and wait.

    await scene.until_phase("thaws", "Done", process=process, timeout=120)  # The capture after the thaw.
    retained = await watching.stored(process.redis_url, slug=SLUG, name="attempt-retained", execution="thaws")
    [entry] = retained["removed"]["pods"]
    assert entry["outcome"] == "deleted"
    assert (entry.get("log_reads") or 0) < 3  # Counted at most at 10 s and 60 s.
    [container] = entry["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 78
    texts = [line.split(" ", 1)[1] for line in container["log"].splitlines()]
    assert texts == ["worker: grant taken", "worker: refused after a frozen node"]
