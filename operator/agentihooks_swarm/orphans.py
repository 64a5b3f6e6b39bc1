"""Worker Pods whose Execution vanished while no replica was watching it: their cleanup still runs.

An Execution holds the operator's finalizer from before its worker exists, so deleting it waits
for its cleanup. Two things end it without that wait: a user removing the finalizer by hand, and
a delete that read the Execution just before the finalizer was added (the API server decides
"no finalizers, delete now" from that read and deletes it after the finalizer's write: the soak
caught it, with the etcd history to show it). The replica that watches the Execution go still
cleans up after it (``Executions._vanished``), but only from its memory: a restart or a new
leader before that cleanup ends forgets it, and its worker Pod stays, uncaptured.

:class:`Orphans` finds them again. On each resync, the leader looks at the worker Pods (from the
worker Pods' watch) whose execution label names no tracked Execution. One whose name Redis says
was claimed (``execution-owners``) by an Execution that no longer exists under that UID is
adopted: the table tracks that Execution again as deleted, and its step cleans up the attempt
like any cancelled one (capture first). Every Pod is judged once per process: a Pod of an
Execution that still exists, or that was never claimed (not launched by this operator), is left
alone from then on.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

from agentihooks_swarm import errors, executions as executions_, store as store_
from agentihooks_swarm.kubernetes import labels, pods as pods_
from agentihooks_swarm.model import Tracked
from agentihooks_swarm.worker_pods import WorkerPod, WorkerPods

logger = logging.getLogger(__name__)


class _Wake(Protocol):
    def __call__(self, uid: str, /) -> None: ...


@dataclasses.dataclass(kw_only=True)
class Orphans:
    workers: WorkerPods
    table: executions_.Executions
    store: store_.AsyncStore
    client: pods_.PodClient
    wake: _Wake
    #: Pods judged already (by namespace, name and generation), adopted or left alone.
    _judged: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)

    async def adopt(self) -> int:
        """Adopt every orphaned attempt found now; how many. Failures leave a Pod for next time."""
        adopted = 0
        for pod in self.workers.unowned():
            key = (pod.namespace, pod.name, pod.generation)
            if key in self._judged:
                continue
            try:
                tracked = await self._judge(pod)
            except (errors.ApiError, errors.StoreUnavailable) as e:
                logger.info(
                    "Could not tell yet whether pod %s/%s is orphaned: %s", pod.namespace, pod.name, e
                )
                continue
            self._judged.add(key)
            if tracked is None or self.table.get(tracked.uid) is not None:
                continue
            self.table.adopt(tracked)
            self.wake(tracked.uid)
            adopted += 1
            logger.warning(
                "Execution %s/%s (uid %s) is gone, but its worker pod %s is not: its cleanup runs now "
                "(the Execution was deleted without waiting for its cleanup while no replica watched it).",
                pod.namespace,
                pod.execution,
                tracked.uid,
                pod.name,
            )
        return adopted

    async def _judge(self, pod: WorkerPod) -> Tracked | None:
        """The deleted Execution that launched ``pod``, to be cleaned up; None when there is none."""
        slug = labels.slug_of(pod.owner)
        generation = int(pod.generation) if pod.generation.isdigit() else 0
        if slug is None or generation < 1:
            return None
        owner = await self.store.owner(slug=slug, execution=pod.execution)
        if owner is None or owner.namespace != pod.namespace:
            return None  # Never claimed here: not a worker this operator launched.
        found = await self.client.read_custom(
            namespace=pod.namespace, plural="executions", name=pod.execution
        )
        if found is not None and (found.get("metadata") or {}).get("uid") == owner.uid:
            return None  # It exists: the table tracks it whenever it needs a step.
        return Tracked(
            namespace=pod.namespace,
            name=pod.execution,
            uid=owner.uid,
            resource_version="",
            spec_generation=None,
            swarm=slug,
            cancel=False,
            deleting=True,
            gone=True,
            status={"attempt": generation},
        )
