"""Read, judge, delete: the one loop by which launch removal and final cleanup remove an object.

The spec's order, for both paths: re-read the object live, judge it against what was pinned (its
UID, the attempt's labels, whether someone else is deleting it), capture and store its evidence,
then delete it by its pinned UID *as it was read*: the judged resourceVersion is a precondition of
the delete too. An object that changed since its read (a Pod that failed after the read that saw
it starting) is refused (409) instead of deleted unseen: it is read again and, still the pinned
object, judged, captured and deleted again; after :data:`JUDGED_TRIES` refused deletes the path
gives up for now (launch keeps the Pod for final cleanup, a cleanup pass fails and the next one
retries). An object someone else deletes, held by the evidence finalizer for the capture, is
released the same way: the release tests the judged resourceVersion, so one that failed after the
read is judged again and captured before it goes.

What a path does with an object it judged its own is its :class:`Evidence` (launch: capture, then
``HSETNX``; cleanup: capture once, then save it with ``sent`` on the journal entry). What each
:class:`Judged` answer means to it (``removed: false``, a journal outcome, a failed pass) stays with
the path. Where the two paths differ in the loop itself, :func:`remove` takes it as a keyword.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import labels as labels_, owners
from agentihooks_swarm.lifecycle import model

#: Deletes of one object refused because it changed since its read, before a removal gives up.
JUDGED_TRIES: Final = 3

Object = dict[str, Any]
K = TypeVar("K")
K_co = TypeVar("K_co", covariant=True)

Outcome = Literal[
    # The read found no object of the name (with ``confirm_gone``, a list agrees).
    "absent",
    # Another object (another UID) has the name.
    "replaced",
    # The attempt's labels no longer match.
    "unselected",
    # Someone is deleting it (``deletionTimestamp``); no delete was sent by this removal.
    "terminating",
    # The delete was accepted.
    "deleted",
    # The delete answered 404, and a list agrees.
    "gone",
    # A 404, or (``confirm_gone``) an object found gone or replaced, that a list contradicts.
    "listed",
    # :data:`JUDGED_TRIES` deletes were refused: it changed each time it was about to be deleted.
    "changed",
    # The path's :class:`Evidence` kept it (``Judged.kept`` says why); no delete was sent.
    "kept",
    # A read, list or delete failed (``Judged.step``, ``Judged.error``).
    "failed",
]


class Objects(Protocol):
    """The calls a removal makes on one kind (a :class:`kubernetes.core.CoreClient`)."""

    async def read(self, *, namespace: str, name: str) -> Object | None: ...

    async def delete(
        self, *, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> Object: ...

    async def release(
        self, *, namespace: str, name: str, uid: str, found: Object, as_judged: bool = False
    ) -> None: ...

    async def still_listed(self, *, namespace: str, name: str, uid: str) -> bool: ...


class Evidence(Protocol[K_co]):
    """What a path does with the object it judged its own, before the delete."""

    async def keep(self, found: Object, *, terminating: bool) -> K_co | None:
        """Capture and store ``found``'s evidence; an answer keeps the object (no delete is sent).
        ``terminating``: someone else is deleting it (asked only with ``capture_terminating``)."""
        ...

    def judging_again(self) -> None:
        """A delete was refused and the object, read again, is still the pinned one: it is judged
        again, as if no delete had been sent."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """The pinned object: its kind (for messages), name and UID, and its attempt's labels."""

    kind: str
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Judged(Generic[K]):
    """How a removal ended."""

    outcome: Outcome
    #: The object as last read (None when it was not found).
    found: Object | None = None
    #: The :class:`Evidence`'s answer, when it kept the object.
    kept: K | None = None
    step: Literal["read", "list", "delete", "release"] | None = None
    error: errors.ApiError | None = None


def _uid(found: Object | None) -> object:
    return ((found or {}).get("metadata") or {}).get("uid")


async def remove(
    *,
    objects: Objects,
    target: Target,
    evidence: Evidence[K],
    guard: model.Guard,
    confirm_gone: bool,
    capture_terminating: bool,
    found: Object | None = None,
) -> Judged[K]:
    """Read, judge, keep the evidence and delete ``target`` as read, until it is deleted, gone or
    judged not to be deleted.

    ``found`` is a read made earlier in the same pass, used when it has the pinned UID.
    ``confirm_gone``: an object the read finds gone, or (after a refused delete) replaced, is
    believed only when a list agrees (cleanup: that ends its removal for good); without it the read
    is believed (launch: "a missing Pod counts as removed"). A 404 to the delete is always checked
    by a list. ``capture_terminating``: an object someone else is deleting is handed to the
    evidence first (cleanup: its evidence would be lost with it); without it, it is left alone
    (launch: final cleanup captures it).
    """
    refused = 0
    #: The last refusal was of this removal's own delete (not of a release as judged).
    resend = False
    while True:
        if found is None or _uid(found) != target.uid:
            try:
                found = await objects.read(namespace=target.namespace, name=target.name)
            except errors.ApiError as e:
                return Judged(outcome="failed", step="read", error=e)
        metadata = (found or {}).get("metadata") or {}
        if found is None or metadata.get("uid") != target.uid:
            outcome: Outcome = "absent" if found is None else "replaced"
            if confirm_gone and (found is None or refused):
                return await _confirmed(objects, target=target, outcome=outcome, found=found)
            return Judged(outcome=outcome, found=found)
        if refused:
            if resend:
                evidence.judging_again()
            if refused == JUDGED_TRIES:
                return Judged(outcome="changed", found=found)
        if not labels_.matches(metadata.get("labels"), target.labels):
            # Relabelled: no longer the attempt's, so neither captured nor held for a capture.
            failed = await _release(objects, target=target, holder=found)
            if failed is not None:
                return Judged(outcome="failed", step="release", error=failed, found=found)
            return Judged(outcome="unselected", found=found)
        terminating = bool(metadata.get("deletionTimestamp"))
        if terminating and not capture_terminating:
            return Judged(outcome="terminating", found=found)
        kept = await evidence.keep(found, terminating=terminating)
        if kept is not None:
            return Judged(outcome="kept", found=found, kept=kept)
        if terminating:  # Someone else deletes it; the evidence finalizer held it for this capture.
            # Released only as judged: a worker that failed since the read is read and judged
            # again (and captured), not let go unseen.
            failed = await _release(objects, target=target, holder=found, as_judged=True)
            if isinstance(failed, errors.PreconditionFailed):
                refused, resend, found = refused + 1, False, None
                continue
            if failed is not None:
                return Judged(outcome="failed", step="release", error=failed, found=found)
            return Judged(outcome="terminating", found=found)
        guard.check(before=f"deleting {target.kind} {target.name}")
        judged = await _delete_as_read(objects, target=target, found=found)
        if judged is not None:
            return judged
        refused, resend, found = refused + 1, True, None


async def _delete_as_read(objects: Objects, *, target: Target, found: Object) -> Judged[Any] | None:
    """Delete by the pinned UID and the resourceVersion that was judged; None when refused for it
    (409: the object changed since ``found`` was read)."""
    version = (found.get("metadata") or {}).get("resourceVersion")
    try:
        answer = await objects.delete(
            namespace=target.namespace,
            name=target.name,
            uid=target.uid,
            resource_version=version if isinstance(version, str) else None,
        )
    except errors.NotFound:
        return await _confirmed(objects, target=target, outcome="gone", found=found)
    except errors.PreconditionFailed:
        return None
    except errors.ApiError as e:
        return Judged(outcome="failed", step="delete", error=e, found=found)
    # Deleted as judged: the evidence finalizer (on the Pod since its create) now only holds a Pod
    # whose evidence is stored, so it goes.
    failed = await _release(objects, target=target, holder=answer)
    if failed is not None:
        return Judged(outcome="failed", step="release", error=failed, found=found)
    return Judged(outcome="deleted", found=found)


async def _release(
    objects: Objects, *, target: Target, holder: Object, as_judged: bool = False
) -> errors.ApiError | None:
    """Remove the evidence finalizer from ``holder`` (the object as last seen), if it has one;
    the error when that failed (the object stays, terminating, for a later pass to release).
    ``as_judged``: only while it is still as ``holder`` shows it (``PreconditionFailed`` if not)."""
    if not owners.holds_evidence(holder):
        return None
    try:
        await objects.release(
            namespace=target.namespace, name=target.name, uid=target.uid, found=holder, as_judged=as_judged
        )
    except errors.ApiError as e:
        return e
    return None


async def _confirmed(
    objects: Objects, *, target: Target, outcome: Outcome, found: Object | None
) -> Judged[Any]:
    """``outcome`` (gone, or replaced) if a list by name no longer shows the pinned UID."""
    try:
        listed = await objects.still_listed(namespace=target.namespace, name=target.name, uid=target.uid)
    except errors.ApiError as e:
        return Judged(outcome="failed", step="list", error=e, found=found)
    return Judged(outcome="listed" if listed else outcome, found=found)
