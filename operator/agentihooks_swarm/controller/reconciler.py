"""The workers that run the lifecycle's steps, and the resync that keeps them coming.

Keys (Execution UIDs) come into one :class:`workqueue.KeyedQueue` from the Executions' informer
(a new Execution, a deletion, a new spec: at once) and from :meth:`Reconciler.resync` (every
Execution that needs steps, every ``CLEANUP_INTERVAL_SECONDS``); ``workers`` workers take them
one at a time, so one Execution's steps never overlap, and at most ``workers`` steps run at once
(each holds API and Redis connections: unbounded, a burst of Executions queued thousands of
requests behind the client's connection limits until they timed out). Only the leader steps: a
standby drops what it is given, and catches up with a resync the moment it leads.

An Execution whose worker has started and runs is *parked*: the resync skips it for
``parked_seconds``, because the worker Pods' watch (:mod:`worker_pods`) wakes it the moment its
Pod changes. Without parking, every resync read the Pod of every running worker, and with
thousands in flight one round took longer than the interval: a worker that ended waited for the
round to reach it. The parked resync stays for what a Pod change does not show (an outcome the
worker wrote to Redis while it still runs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from agentihooks_swarm import errors, metrics as metrics_
from agentihooks_swarm.controller import executions as executions_, worker_pods
from agentihooks_swarm.controller.workqueue import KeyedQueue, Priority
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import model, step as lifecycle_, watched

logger = logging.getLogger(__name__)

#: Steps at once.
WORKERS: Final = 32
#: Seconds before an Execution whose step failed unexpectedly is stepped again.
ERROR_RETRY: Final = 10.0
#: The order a resync queues steps in: a worker Pod whose evidence waits (it ended, a container
#: terminated, or it is being deleted), then a deleted Execution, then the rest.
URGENCY_EVIDENCE: Final = 0
URGENCY_DELETION: Final = 1
URGENCY_ROUTINE: Final = 2


def urgency(tracked: model.Tracked, *, workers: worker_pods.WorkerPods) -> int:
    """How soon ``tracked``'s step is wanted, from the worker Pods' watch: evidence first, since a
    refused worker's Pod is what the operator exists to keep, and it is gone once someone else
    deletes it without waiting; then deletions (a user waits on them); then everything else. A
    watch out of sync says nothing, and the order is the table's."""
    seen = workers.seen(
        namespace=tracked.namespace,
        name=labels.worker_pod_name(execution=tracked.name, generation=tracked.attempt_number),
    )
    if seen.pod is not None and watched.ended(seen.pod.digest):
        return URGENCY_EVIDENCE
    return URGENCY_DELETION if tracked.deleting or tracked.gone else URGENCY_ROUTINE


@dataclasses.dataclass(kw_only=True)
class Reconciler:
    lifecycle: lifecycle_.Lifecycle
    table: executions_.Executions
    queue: KeyedQueue[str]
    metrics: metrics_.Metrics
    holds: Callable[[], bool]
    interval: float
    workers: int = WORKERS
    #: How long the resync skips an Execution whose worker runs; 0 (no parking) without a watch
    #: of the worker Pods to wake it.
    parked_seconds: float = 0.0
    #: Whether that watch is in sync now: a worker is parked only while its end would be seen.
    parking: Callable[[], bool] = lambda: False
    #: Before each resync: find attempts whose Execution vanished unwatched (:mod:`orphans`).
    adopt: Callable[[], Awaitable[int]] | None = None
    #: How soon an Execution's step is wanted (lower first): a resync, and above all a new
    #: leader's catch-up, queues its steps in that order (:func:`urgency`).
    urgency: Callable[[model.Tracked], int] = lambda tracked: URGENCY_ROUTINE
    #: The Executions queued by the last resync that have not been stepped since, and when it was.
    _round: set[str] = dataclasses.field(default_factory=set)
    _round_began: float = 0.0
    _round_size: int = 0

    async def work(self) -> None:
        """Run the workers until cancelled (a supervised task: a worker's failure restarts all)."""
        async with asyncio.TaskGroup() as group:
            for number in range(self.workers):
                group.create_task(self._worker(), name=f"step worker {number}")

    async def _worker(self) -> None:
        while True:
            uid = await self.queue.get()
            try:
                await self.step(uid)
            finally:
                self.queue.done(uid)
                self._stepped(uid)

    async def step(self, uid: str) -> lifecycle_.Step | None:
        """One step of the Execution with this UID, if this replica leads and it still needs one."""
        tracked = self.table.get(uid)
        if tracked is None or not self.holds():
            return None
        try:
            step = await self.lifecycle.step(tracked)
        except errors.NotLeader:
            return None
        except Exception:
            self.metrics.steps.labels(result="error").inc()
            logger.exception(
                "A step of %s/%s failed unexpectedly; it is tried again in %ss",
                tracked.namespace,
                tracked.name,
                ERROR_RETRY,
            )
            self.table.defer(uid, seconds=ERROR_RETRY)
            return None
        if step.after is not None:
            self.table.observe(uid=uid, kind="MODIFIED", body=step.after)
        if tracked.gone and step.settled:
            self.table.forget(uid)
        if step.retry_after is not None:
            self.table.defer(uid, seconds=step.retry_after)
        elif step.waits_for_pod and self.parked_seconds > 0 and self.parking():
            self.table.defer(uid, seconds=self.parked_seconds)
        self.metrics.steps.labels(result="done" if step.settled else "progress").inc()
        return step

    def _stepped(self, uid: str) -> None:
        if uid not in self._round:
            return
        self._round.discard(uid)
        if not self._round:
            logger.info(
                "A pass over %d executions in flight done in %.1fs.",
                self._round_size,
                asyncio.get_running_loop().time() - self._round_began,
            )

    def resync_now(self) -> None:
        """Queue every Execution that needs a step (and is not deferred), most urgent first: one
        whose evidence waits at the queue's ``EVIDENCE`` priority, so that it goes ahead of steps a
        watch queued before it (a burst of new Executions at a new leader's catch-up), and the rest
        behind them (``LATER``)."""
        ranked = sorted(((self._urgency(uid), uid) for uid in self.table.due()), key=lambda item: item[0])
        due = [uid for _, uid in ranked]
        if not self._round and due:  # A new round once the last one is over (it says how long).
            self._round, self._round_size = set(due), len(due)
            self._round_began = asyncio.get_running_loop().time()
        for urgent, uid in ranked:
            self.queue.add(uid, priority=Priority.EVIDENCE if urgent == URGENCY_EVIDENCE else Priority.LATER)
        self.metrics.queue_depth.set(len(self.queue))
        self.metrics.executions_tracked.set(len(self.table))

    def _urgency(self, uid: str) -> int:
        tracked = self.table.get(uid)
        return URGENCY_ROUTINE if tracked is None else self.urgency(tracked)

    async def resync(self) -> None:
        """Every ``interval`` seconds, while leading, queue every Execution that needs a step."""
        while True:
            await asyncio.sleep(self.interval)
            if self.holds():
                if self.adopt is not None:
                    await self.adopt()
                self.resync_now()
