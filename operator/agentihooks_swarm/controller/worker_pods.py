"""The worker Pods, watched: a change of an Execution's worker wakes its step at once.

An attempt whose worker runs is moved on by a change of its Pod (it ends, fails, is deleted). The
resync used to find that change by reading the Pod of every running worker on every round, and
with thousands in flight a round took longer than its interval: a worker that had ended waited
for the round to reach it, and the reads took the capacity new Executions needed. With this
watch, a step that finds its worker running is parked (``Reconciler.parked_seconds``) and the
change wakes it.

:class:`WorkerPods` is the informer's handler for every Pod with the execution label. Of each it
keeps only what a step judges (:func:`digest`, a few short strings), and it wakes the Executions
that the Pod's namespace and execution label name, through ``owners`` (the Executions' table):

* a Pod whose digest changed (a watch event, or a list after the watch lost its place);
* a Pod that was deleted, or that a new list no longer shows.

A Pod that may have ended (:func:`~agentihooks_swarm.lifecycle.watched.ended`: failed, succeeded,
a container terminated, or being deleted) wakes its Executions through ``evidence``, the queue's
most urgent priority: its evidence may be waiting, and its capture goes ahead of launches and
other bookkeeping.

A Pod that is new to the table wakes nothing when it comes from the watch (the launch that
created it has just stepped), and wakes its Execution when it comes from a later list (it may
have changed while nobody watched). The first list wakes nothing: the operator's first resync
steps everything. A step reads the Pod itself where it decides anything of it; the view also
spares it the reads a stale answer cannot harm (:mod:`lifecycle.watched`). Of a handed worker's
Pod in a terminal phase the table keeps the whole object, which the finality check judges instead
of reading it again (:meth:`~agentihooks_swarm.lifecycle.watched.WorkerPod.terminal`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.lifecycle.watched import UNKNOWN, Seen, WorkerPod, digest, ended

__all__ = ["PAGE", "PARKED_ROUNDS", "WorkerPod", "WorkerPods", "digest"]

#: The phases a Pod never leaves.
TERMINAL: Final = frozenset({"Failed", "Succeeded"})
#: Pods listed per request when the watch (re)lists.
PAGE: Final = 500
#: A parked Execution is stepped by every this many resyncs (not every one): what a Pod change
#: does not show, an outcome a worker wrote to Redis while it still runs, waits at most that long.
PARKED_ROUNDS: Final = 6


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class WorkerPods:
    """Worker Pods by namespace and name, as digests: an informer's handler that wakes steps."""

    def __init__(
        self,
        *,
        owners: Callable[[str, str], Iterable[str]],
        wake: Callable[[str], None],
        evidence: Callable[[str], None] | None = None,
        handed: Callable[[str, str], bool] | None = None,
    ) -> None:
        """``wake``: queue an Execution's step; ``evidence``: queue it first, for a worker that
        may have ended (``wake`` when not given). ``handed``: whether an Execution of this
        namespace and name handed its worker its grant; such a worker's terminal Pod is kept
        whole (:meth:`WorkerPod.terminal`). Without it, none is."""
        self._handed = handed
        self._owners = owners
        self._wake = wake
        self._evidence = evidence or wake
        self._pods: dict[tuple[str, str], WorkerPod] = {}
        self._listed: set[tuple[str, str]] | None = None
        self._lists = 0
        self._synced = False
        #: Wakes sent (for the log and tests).
        self.woken = 0

    def __len__(self) -> int:
        return len(self._pods)

    def synced(self, value: bool) -> None:
        """Told by the informer whether its view is whole (listed, and watching)."""
        self._synced = value

    def seen(self, *, namespace: str, name: str) -> Seen:
        """What the watch last saw of the Pod ``namespace/name`` (:class:`lifecycle.watched.WorkerWatch`):
        nothing known while the informer is out of sync."""
        if not self._synced:
            return UNKNOWN
        return Seen(known=True, pod=self._pods.get((namespace, name)))

    def unowned(self) -> list[WorkerPod]:
        """The Pods whose execution label names no Execution the table of Executions tracks: a
        Done one's (cleanup deleted ours, so these are replaced, relabelled or foreign Pods), or
        one that vanished while no replica watched it (see :mod:`orphans`)."""
        return [p for p in self._pods.values() if not tuple(self._owners(p.namespace, p.execution))]

    def _wake_owners(self, namespace: str, execution: str, *, pod: WorkerPod | None = None) -> None:
        """Wake the Executions that ``execution`` names; first, if ``pod`` may have ended."""
        wake = self._evidence if pod is not None and ended(pod.digest) else self._wake
        for uid in self._owners(namespace, execution):
            self.woken += 1
            wake(uid)

    # --- informer.Handler ---------------------------------------------------------------------

    def begin(self) -> None:
        self._listed = set()

    def apply(self, kind: str | None, body: Mapping[str, Any]) -> None:
        metadata = _mapping(body.get("metadata"))
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        found = _mapping(metadata.get("labels"))
        execution = str(found.get(labels.EXECUTION) or "")
        if not key[1] or not execution:
            return
        old = self._pods.get(key)
        if kind == "DELETED":
            self._pods.pop(key, None)
            self._wake_owners(key[0], execution)
            return
        if kind is None and self._listed is not None:
            self._listed.add(key)
        new = WorkerPod(
            namespace=key[0],
            name=key[1],
            execution=execution,
            owner=str(found.get(labels.OWNER) or ""),
            generation=str(found.get(labels.GENERATION) or ""),
            digest=digest(body),
            controller=owners.controller_uid(body) or "",
            held=owners.holds_evidence(body),
            created=str(metadata.get("creationTimestamp") or ""),
            deadline=str(_mapping(metadata.get("annotations")).get(labels.STARTUP_DEADLINE) or ""),
            body=self._kept(body, namespace=key[0], execution=execution),
        )
        self._pods[key] = new
        if old is None:
            if kind is None and self._lists > 0:
                self._wake_owners(key[0], execution, pod=new)
            return
        if (old.execution, old.digest) != (new.execution, new.digest):
            self._wake_owners(key[0], execution, pod=new)
            if old.execution != execution:
                self._wake_owners(key[0], old.execution)

    def _kept(self, body: Mapping[str, Any], *, namespace: str, execution: str) -> Mapping[str, Any] | None:
        """``body`` without its managedFields when it is terminal and its Execution handed it its
        grant (a step then judges it without a read); else None. A refused launch's Pod is not
        kept: launch removal reads it again anyway, and thousands may wait at once."""
        if _mapping(body.get("status")).get("phase") not in TERMINAL:
            return None
        if self._handed is None or not self._handed(namespace, execution):
            return None
        metadata = {k: v for k, v in _mapping(body.get("metadata")).items() if k != "managedFields"}
        return {**body, "metadata": metadata}

    def end(self) -> None:
        listed, self._listed = self._listed or set(), None
        for key in [k for k in self._pods if k not in listed]:
            self._wake_owners(key[0], self._pods.pop(key).execution)
        self._lists += 1

    def needs_relist(self) -> bool:
        return False
