"""The ``flow`` Swarm of the cleanup tests that run the operator as a process: a worker that takes
its grant, runs a little, then fails with exit 78 and the planted log; and its records' keys."""

from __future__ import annotations

from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import labels
from tests.support import builders, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.planting import PLANTED

SLUG = "flow"
PREFIX = "agentihooks-swarm"


def key(name: str) -> str:
    return store_.key(PREFIX, SLUG, name)


async def start_failing_worker(
    api: client.ApiClient,
    cluster: ControlPlane,
    *,
    namespace: str,
    execution: str,
    run_for: str = "3s",
    annotations: dict[str, str] | None = None,
) -> None:
    """A Swarm whose worker takes its grant, runs a little, then fails with exit 78."""
    pod = labels.worker_pod_name(execution=execution, generation=1)
    await pods.plant_log(cluster=cluster, namespace=namespace, pod=pod, container="worker", content=PLANTED)
    behaviour = annotations or pods.protocol_annotations(
        phase="Failed", exit_code=78, reason="Error", run_for=run_for
    )
    await watching.create(api, builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour))
    await watching.create(api, builders.execution(name=execution, namespace=namespace, swarm=SLUG))
