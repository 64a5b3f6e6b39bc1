"""The ``flow`` Swarm of the cleanup tests that run the operator as a process: a worker that takes
its grant, runs a little, then fails with exit 78 and the planted log; and its records' keys."""

from __future__ import annotations

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import labels
from tests.support import pods
from tests.support.fixtures_scene import Scene
from tests.support.planting import PLANTED

SLUG = "flow"
PREFIX = "agentihooks-swarm"


def key(name: str) -> str:
    return store_.key(PREFIX, SLUG, name)


async def start_failing_worker(
    scene: Scene,
    *,
    execution: str,
    run_for: str = "3s",
    annotations: dict[str, str] | None = None,
) -> None:
    """A Swarm whose worker takes its grant, runs a little, then fails with exit 78."""
    pod = labels.worker_pod_name(execution=execution, generation=1)
    await pods.plant_log(
        cluster=scene.cluster, namespace=scene.namespace, pod=pod, container="worker", content=PLANTED
    )
    behaviour = annotations or pods.protocol_annotations(
        phase="Failed", exit_code=78, reason="Error", run_for=run_for
    )
    await scene.swarm(name=SLUG, annotations=behaviour)
    await scene.execution(name=execution, swarm=SLUG)
