"""What the operator's watch of its worker Pods last saw of one Pod, and when a step may act on
that instead of asking the API server.

The watch (:class:`controller.worker_pods.WorkerPods`) keeps of each worker Pod a few short
strings (:class:`WorkerPod`). A step reads it through :class:`WorkerWatch` to spare a request
where a stale view costs nothing but a later step, and never where it could cost evidence:

* **Adoption.** An owned Pod under the worker's name that the watch has seen, not being deleted,
  is adopted without the create that would answer 409. A refused launch adopts it as watched: its
  launch removal's re-read judges it. A launch that hands it its grant reads it live first (one
  read instead of two): a Pod deleted since, held by the evidence finalizer (an earlier launch's
  removal that stopped before recording it, say), would otherwise be handed a grant on its way
  out. A Pod the watch has not seen yet, or one that is not plainly this attempt's own, takes
  today's path: create, then a live read.
* **Finality.** A Pod the watch saw ``Running`` with every container running has not ended, so the
  step waits for its next change without reading it. A Pod the watch saw not ended and not yet
  started (Pending, a container waiting) within its startup deadline (its creation time and
  deadline annotation, kept with its digest) has nothing a live read could act on either: only
  its ending or that deadline could, and its ending is a change the watch brings, which wakes the
  step; the deadline is judged again at the next resync. A Pod the watch saw in a terminal phase
  (``Failed``, ``Succeeded``), of an Execution that handed it its grant, is judged and captured
  from the watch's copy (:meth:`WorkerPod.terminal`): no phase follows those, and its delete or
  release names the copy's ``resourceVersion``, so a copy that lags is refused and read again.
  Anything else (a container terminated, being deleted, past its startup deadline, an outcome or
  a cancel to act on) is read live, as the startup deadline's action and the capture need the
  whole Pod.
* **The cleanup pin** is not built from the watch alone: see :func:`cleanup.pin`.

Whatever the watch says, a Pod is deleted or released only as the API server has it: the delete
(or release) applies only to the UID and resourceVersion that were judged. Launch removal judges
only a live read (the spec's re-read).

A watch out of sync (listing again after a 410, a failure, before its first list) answers
nothing: :meth:`WorkerWatch.seen` says it does not know, and the step reads live.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from agentihooks_swarm.kubernetes import labels, owners

#: What a step judges of a Pod: its UID, phase, whether it is being deleted, and each container's
#: state (``waiting``, ``running`` or ``terminated``) with its restart count.
Digest = tuple[str, str, bool, tuple[tuple[str, str, int], ...]]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def digest(body: Mapping[str, Any]) -> Digest:
    metadata = _mapping(body.get("metadata"))
    status = _mapping(body.get("status"))
    containers: list[tuple[str, str, int]] = []
    for field in ("initContainerStatuses", "containerStatuses"):
        found = status.get(field)
        for item in found if isinstance(found, list) else []:
            item = _mapping(item)
            state = next(iter(_mapping(item.get("state"))), "")
            restarts = item.get("restartCount")
            containers.append(
                (str(item.get("name") or ""), str(state), restarts if isinstance(restarts, int) else 0)
            )
    return (
        str(metadata.get("uid") or ""),
        str(status.get("phase") or ""),
        bool(metadata.get("deletionTimestamp")),
        tuple(containers),
    )


def ended(found: Digest) -> bool:
    """Whether a Pod may have ended: being deleted, past Pending and Running, or with a container
    terminated. Such a Pod's evidence may be waiting, and only a live read of it says more."""
    _, phase, deleting, containers = found
    return (
        deleting or phase not in ("", "Pending", "Running") or any(c[1] == "terminated" for c in containers)
    )


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerPod:
    """What the watch keeps of one worker Pod."""

    namespace: str
    name: str
    #: Its labels: the execution it was launched for, the controller owner, the generation.
    execution: str
    owner: str
    generation: str
    digest: Digest
    #: The UID of the Execution its controller reference names ("" when it has none).
    controller: str = ""
    #: Whether it carries the operator's evidence finalizer (held until its evidence is stored).
    held: bool = False
    #: Its ``creationTimestamp`` and startup-deadline annotation, as the API gave them: whether it
    #: is still within that deadline (:func:`finals.within_deadline`) needs no read.
    created: str = ""
    deadline: str = ""
    #: The whole Pod as watched, kept only once it is terminal (``Failed``, ``Succeeded``) and its
    #: Execution has handed it its grant: see :meth:`terminal`.
    body: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def uid(self) -> str:
        return self.digest[0]

    @property
    def deleting(self) -> bool:
        return self.digest[2]

    def as_object(self) -> dict[str, Any]:
        """The Pod as far as the watch knows it, in the API's shape: its name, UID, the attempt's
        labels, its controller reference and finalizer, its phase (what :meth:`model.Attempt.owns`
        and a launch's hand read; never what a capture reads)."""
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "labels": {
                labels.OWNER: self.owner,
                labels.EXECUTION: self.execution,
                labels.GENERATION: self.generation,
            },
        }
        if self.controller:
            metadata["ownerReferences"] = [
                owners.execution_reference(name=self.execution, uid=self.controller)
            ]
        if self.held:
            metadata["finalizers"] = [owners.EVIDENCE_FINALIZER]
        return {"metadata": metadata, "status": {"phase": self.digest[1]}}

    def terminal(self) -> dict[str, Any] | None:
        """The whole Pod as the watch saw it in a terminal phase (a copy), or None when the watch
        did not keep it. A Pod's phase never leaves ``Failed`` or ``Succeeded``, so the finality
        check judges it from this instead of reading it again; its capture reads the logs live,
        and its delete (or release) carries this version's ``resourceVersion`` as a precondition,
        so a copy the watch had not brought up to date is refused and read again."""
        return None if self.body is None else copy.deepcopy(dict(self.body))

    def running(self) -> bool:
        """Running, with every container (init containers included) running, and not being
        deleted: its worker has started and has not ended, so there is nothing to read yet."""
        _, phase, deleting, containers = self.digest
        return (
            phase == "Running"
            and not deleting
            and bool(containers)
            and all(c[1] == "running" for c in containers)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """What the watch says of one Pod name: ``known`` False while it is out of sync (ask the API
    server); else ``pod``, or None when the watch holds no Pod of that name."""

    known: bool
    pod: WorkerPod | None = None


UNKNOWN = Seen(known=False)


class WorkerWatch(Protocol):
    """The worker Pods as the operator's watch last saw them (see the module docstring)."""

    def seen(self, *, namespace: str, name: str) -> Seen: ...


class SwarmWatch(Protocol):
    """The Swarms as the operator's watch of them last saw them.

    A launch reads its Swarm here first and asks the API server only when the watch has no answer:
    it is listing again, or has not seen the Swarm yet (one created a moment ago), so a watch that
    lags never makes a Swarm look missing. A Swarm changed a moment ago may launch one more worker
    from its previous spec, as if the change had come a moment later: the watch brings the change
    within its lag, a launch the Swarm's template made the API server reject keeps the Swarm's UID
    and generation in its status, and a Swarm change launches such Executions again
    (:mod:`swarm.relaunch`). Nothing a launch reads of its Swarm decides a capture or a delete."""

    def swarm(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """The Swarm as watched, or None: ask the API server."""
        ...
