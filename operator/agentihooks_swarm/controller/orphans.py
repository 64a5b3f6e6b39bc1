"""Worker Pods whose Execution vanished while no replica was watching it: their cleanup still runs.

A deleted Execution goes at once (it carries no finalizer of the operator's: :mod:`lifecycle.step`),
and its worker Pod stays, terminating and held by its evidence finalizer, until it is captured. The
replica that watches the Execution go cleans up after it (``Executions._vanished``), but only from
its memory: a restart or a new leader before that cleanup ends forgets it, and its worker Pod
stays, uncaptured.

:class:`Orphans` finds them again. On each resync, the leader looks at the worker Pods (from the
worker Pods' watch) whose execution label names no tracked Execution. One whose name Redis says
was claimed (``execution-owners``) by an Execution that no longer exists under that UID, and which
that Execution owns (or, once an orphaning delete stripped its owner reference, which the hand
its launch recorded names by UID), is adopted: the table tracks that Execution again as deleted,
and its step cleans up the attempt like any cancelled one (capture first). Every Pod is judged
once per process: a Pod of an Execution that still exists, or that was never claimed (not
launched by this operator), is left alone from then on.

A cleanup can also be left with no Pod to find it by: the Execution went unwatched after its
cleanup pinned its Pods and before it retained, and the Pods went too (deleted by its pass before
the operator stopped, by a user, or with their node). Its ``cleanup-journal`` entry would then stay
for good, and with it every record of that execution, which the retention sweep never removes
while a journal entry is there. So the leader also reads the names in each swarm's journal (the
swarms that retained before, and those of the tracked Executions): an entry whose owner
(``execution-owners``) is no tracked Execution, and which the API server no longer has under that
UID, is adopted the same way; its step finds the pinned Pods gone (``absent`` or
``absent_after_send``) and retains the records, as any cleanup pass does. An entry whose name's
claim a Redis failover dropped is judged by the swarm's namespace instead: with no Execution of that
name there, it is finished the same way. Each entry is judged once per process and owner UID, and
an entry in a namespace this replica may not read is left alone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable
from typing import Protocol, TypeVar

import pydantic
import redis.exceptions

from agentihooks_swarm import errors, metrics as metrics_, records
from agentihooks_swarm.controller import executions as executions_
from agentihooks_swarm.controller.worker_pods import WorkerPod, WorkerPods
from agentihooks_swarm.kubernetes import custom, labels
from agentihooks_swarm.lifecycle.model import Tracked
from agentihooks_swarm.storage import keys, operations

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class _Wake(Protocol):
    def __call__(self, uid: str, /) -> None: ...


@dataclasses.dataclass(kw_only=True)
class Orphans:
    workers: WorkerPods
    table: executions_.Executions
    store: operations.AsyncStore
    executions: custom.CustomClient
    wake: _Wake
    metrics: metrics_.Metrics
    #: Pods judged already (by namespace, name and generation), adopted or left alone.
    _judged: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)
    #: Journal entries judged already (by swarm, execution and owner UID), adopted or left alone.
    _journals_judged: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)

    async def adopt(self) -> int:
        """Adopt every orphaned attempt found now; how many. Failures leave it for next time."""
        adopted = await self._adopt_pods()
        try:
            adopted += await self._adopt_journals()
        except (errors.ApiError, errors.StoreUnavailable) as e:
            logger.info("Could not look for unfinished cleanups of gone executions yet: %s", e)
        return adopted

    async def _adopt_pods(self) -> int:
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
                "(the Execution was deleted while no replica watched it).",
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
        if owner is None and pod.controller and pod.held:
            # Unclaimed, yet owned by an Execution and held by the evidence finalizer, as only a
            # launch makes a Pod: the claim was lost with writes a Redis failover dropped. Its
            # Execution, if gone, is cleaned up by its Pod's owner UID (its step finds the Pod
            # it owns); left alone, the Pod would be held Terminating for good once deleted.
            return await self._gone_owner(pod, uid=pod.controller, slug=slug, generation=generation)
        if owner is None or owner.namespace != pod.namespace:
            return None  # Never claimed here: not a worker this operator launched.
        if not pod.controller and await self._handed(pod, slug=slug, generation=generation):
            # An orphaning delete stripped its reference; the hand its launch recorded names it.
            return await self._gone_owner(pod, uid=owner.uid, slug=slug, generation=generation)
        if pod.controller != owner.uid:
            # Labelled for that Execution, but not owned by it: a look-alike, never captured.
            self.metrics.look_alike_pods.labels(path="orphans").inc()
            logger.warning(
                "Pod %s/%s is labelled as a worker of Execution %s (uid %s) but not owned by it; "
                "it is left alone.",
                pod.namespace,
                pod.name,
                pod.execution,
                owner.uid,
            )
            return None
        return await self._gone_owner(pod, uid=owner.uid, slug=slug, generation=generation)

    async def _handed(self, pod: WorkerPod, *, slug: str, generation: int) -> bool:
        """Whether the hand recorded for ``pod``'s execution names this very Pod (its UID, which
        only the API server gives, and its attempt): a Pod an orphaning delete left unowned."""
        hand = await self.store.read_hand(slug=slug, execution=pod.execution)
        return (
            hand is not None and hand.generation == generation and bool(pod.uid) and hand.pod_uid == pod.uid
        )

    async def _gone_owner(self, pod: WorkerPod, *, uid: str, slug: str, generation: int) -> Tracked | None:
        """Execution ``uid`` of ``pod``, tracked again as deleted; None while it exists."""
        found = await self.executions.read(namespace=pod.namespace, name=pod.execution)
        if found is not None and (found.get("metadata") or {}).get("uid") == uid:
            return None  # It exists: the table tracks it whenever it needs a step.
        return _gone(namespace=pod.namespace, name=pod.execution, uid=uid, slug=slug, generation=generation)

    async def _adopt_journals(self) -> int:
        """Adopt the gone Executions whose cleanup-journal entry nobody finishes; how many."""
        adopted = 0
        slugs = set(await self.store.swarms()) | {t.swarm for t in self.table if t.swarm}
        for slug in sorted(slugs):
            for tracked in await self._unfinished(slug):
                if self.table.get(tracked.uid) is not None:
                    continue  # Its deletion was seen meanwhile: the table cleans up after it.
                self.table.adopt(tracked)
                self.wake(tracked.uid)
                adopted += 1
                logger.warning(
                    "Execution %s/%s (uid %s) is gone and so are its pods, but its cleanup-journal entry "
                    "is not finished: its cleanup runs now and retains its records.",
                    tracked.namespace,
                    tracked.name,
                    tracked.uid,
                )
        return adopted

    async def _unfinished(self, slug: str) -> list[Tracked]:
        """The gone Executions of ``slug`` with a journal entry nobody finishes."""
        journal = self.store.key(slug, keys.JOURNAL)
        names = sorted(str(n) for n in await _redis(self.store.redis.hkeys(journal)))
        present = set(names)
        self._journals_judged = {j for j in self._journals_judged if j[0] != slug or j[1] in present}
        if not names:
            return []
        claims = await _redis(self.store.redis.hmget(self.store.key(slug, keys.OWNERS), names))
        found = []
        for name, raw in zip(names, claims, strict=True):
            owner = _owner(raw)
            key = (slug, name, owner.uid if owner is not None else "")
            if key in self._journals_judged:
                continue
            if owner is None:
                found.extend(await self._unclaimed(slug=slug, name=name))
                self._journals_judged.add(key)
                continue
            if self.table.get(owner.uid) is not None:
                continue  # Tracked: its own steps finish the entry.
            try:
                tracked = await self._journal_orphan(slug=slug, name=name, owner=owner)
            except errors.ApiRefused as e:
                logger.info(
                    "Leaving the cleanup-journal entry of %s/%s alone: its Execution cannot be read "
                    "here (%s).",
                    owner.namespace,
                    name,
                    e,
                )
                tracked = None
            except (errors.ApiError, errors.StoreUnavailable) as e:
                logger.info(
                    "Could not tell yet whether execution %s/%s is gone: %s", owner.namespace, name, e
                )
                continue
            self._journals_judged.add(key)
            if tracked is not None:
                found.append(tracked)
        return found

    async def _unclaimed(self, *, slug: str, name: str) -> list[Tracked]:
        """A journal entry whose name has no owner claim (a Redis failover can drop the claim a
        launch made): the swarm's own namespace says where its Execution was, and when no
        Execution of that name is there, the entry is finished as a gone Execution's (known by
        :func:`unclaimed_uid`, since its UID went with the claim). An entry of an older version
        (no slug namespace either), or one whose Execution cannot be read now, is left alone."""
        try:
            namespace = await self.store.slugs.owner(slug=slug)
            if namespace is None:
                return []
            if await self.executions.read(namespace=namespace, name=name) is not None:
                return []  # It exists: the table tracks it whenever it needs a step.
            entry = await self.store.read_journal(slug=slug, execution=name)
        except (errors.ApiError, errors.StoreUnavailable) as e:
            logger.info(
                "Leaving the unclaimed cleanup-journal entry of %s/%s alone for now: %s", slug, name, e
            )
            return []
        if entry is None:
            return []
        uid = unclaimed_uid(slug=slug, name=name)
        return [_gone(namespace=namespace, name=name, uid=uid, slug=slug, generation=entry.generation)]

    async def _journal_orphan(self, *, slug: str, name: str, owner: records.Owner) -> Tracked | None:
        """The gone Execution that owns the journal entry ``name``; None when it still exists."""
        execution = await self.executions.read(namespace=owner.namespace, name=name)
        if execution is not None and (execution.get("metadata") or {}).get("uid") == owner.uid:
            return None  # It exists: the table tracks it whenever it needs a step.
        entry = await self.store.read_journal(slug=slug, execution=name)
        if entry is None:
            return None  # Finished meanwhile.
        return _gone(
            namespace=owner.namespace, name=name, uid=owner.uid, slug=slug, generation=entry.generation
        )


def unclaimed_uid(*, slug: str, name: str) -> str:
    """What the table knows a gone Execution by when its UID went with its name's claim: no
    Kubernetes UID has this shape, so it never stands for a live Execution nor owns a Pod."""
    return f"unclaimed:{slug}/{name}"


def _gone(*, namespace: str, name: str, uid: str, slug: str, generation: int) -> Tracked:
    """A deleted Execution, tracked again so that its step cleans up its attempt."""
    return Tracked(
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version="",
        spec_generation=None,
        swarm=slug,
        cancel=False,
        deleting=True,
        gone=True,
        status={"attempt": generation},
    )


def _owner(raw: object) -> records.Owner | None:
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        return records.load(records.Owner, raw)
    except pydantic.ValidationError:
        return None


async def _redis(call: Awaitable[_T]) -> _T:
    """A Redis command the store has no method for, its failures sorted as the store sorts them."""
    try:
        return await call
    except (redis.exceptions.RedisError, OSError) as e:
        raise errors.StoreUnavailable(f"Redis is unavailable: {errors.trim(str(e))}") from e
