"""Final attempt cleanup: pin, capture once, delete by UID, retain the evidence.

One pass of :func:`run` walks the attempt's ``cleanup-journal`` entry and leaves Redis consistent
at every step, so the operator may be killed anywhere and a later pass picks up where it stopped:

1. Pin every Pod and Service of the attempt once; objects created later are not added. No entry
   is created for an execution that is retained already, nor when there is nothing to pin: a
   pass with nothing to remove has nothing to resume, so it retains at once, on condition that
   no other pass has created an entry meanwhile (:class:`Unwritten`).
2. For each pinned Pod that still exists with the same UID and labels: capture its startup
   diagnostics once and save them on the pinned entry as ``startup`` together with ``sent`` —
   *before* the delete is sent. A restarted pass reads the saved capture and never reads the log
   again; ``sent`` tells ``absent`` (gone before we sent) from ``absent_after_send``.
3. A failed log read counts in ``log_reads``; below ``LOG_READS`` the pass fails and the Pod stays;
   at ``LOG_READS`` the Pod is removed with exit reasons only (no ``log`` field). A failure that may
   pass (the Pod's node or the API server did not answer) counts only once enough time has passed
   since the first failure (:data:`COUNTED_AFTER`): a node that is unreachable for a few minutes
   costs no log, and a dead node's Pod still goes.
4. When every pinned object has an outcome, the removed map moves to ``attempt-retained`` and the
   journal entry is cleared, in one Lua script (atomic; one slot, so legal on a Redis Cluster).

Every journal save is a compare-and-set on the entry's version, and the first retain wins: a pass
that works from records another pass has changed since fails (``StaleWrite``) instead of writing
them back. Before each Redis write and each delete, ``guard.check`` proves this replica still leads.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable
from typing import Any, Final, Literal

from agentihooks_swarm import errors, metrics as metrics_, records
from agentihooks_swarm.capture import causes, diagnostics
from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.lifecycle import events, finals, model, removal
from agentihooks_swarm.storage import operations

logger = logging.getLogger(__name__)

#: Failed log reads of one pinned Pod after which it is removed with exit reasons only. No setting.
LOG_READS: Final = 3
#: A failed read that may pass (the node, its kubelet or the API server did not answer) is the
#: k-th counted failure only once ``COUNTED_AFTER[k - 1]`` seconds have passed since the Pod's
#: first failed read; a refusal (403 …) counts at once, on every pass. No setting.
COUNTED_AFTER: Final = (10.0, 60.0, 300.0)

Kind = Literal["pod", "service"]


class PassFailed(errors.SwarmError):
    """This pass stopped early on purpose (a failed log read, a Pod still terminating); retry later."""


class Terminating(PassFailed):
    """A pinned object is being deleted, not by this cleanup (launch removal, a user, a controller);
    the pass waits for it to go. Within its grace period that is the normal course of a delete,
    so ``overdue`` is False and the step waits quietly; past it, the wait is reported."""

    def __init__(self, message: str, *, overdue: bool) -> None:
        super().__init__(message)
        self.overdue = overdue


def counted(cause: causes.Cause, *, log_reads: int, since_first: float) -> bool:
    """Whether a failed read counts in ``log_reads`` (see :data:`COUNTED_AFTER`)."""
    if not cause.may_pass:
        return True
    return log_reads >= len(COUNTED_AFTER) or since_first >= COUNTED_AFTER[log_reads]


@dataclasses.dataclass(kw_only=True)
class _Pass:
    runtime: model.Runtime
    store: operations.AsyncStore
    guard: model.Guard
    attempt: model.Attempt
    notify: events.Events
    journal: records.Journal
    #: Pods read earlier in this same pass (the pin's list, the finality check's read), by name:
    #: a pinned Pod found here with its pinned UID is not read again milliseconds later.
    seen: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    clock: Callable[[], datetime.datetime] = finals.now

    async def save(self, *, before: str = "saving the journal") -> None:
        self.guard.check(before=before)
        await self.store.save_journal(slug=self.attempt.slug, journal=self.journal)

    async def remove(self, entry: records.PinnedObject, kind: Kind) -> records.RemovalOutcome:
        """Capture (Pods only) and delete one pinned object; return its outcome.

        The delete applies only to the object as it was judged (its resourceVersion): a Pod that
        failed after a read that saw it running is judged again, and captured, not deleted unseen
        (:func:`removal.remove`).
        """
        judged: removal.Judged[None] = await removal.remove(
            objects=self.runtime.cluster.pods if kind == "pod" else self.runtime.cluster.services,
            target=removal.Target(
                kind=kind,
                namespace=self.attempt.namespace,
                name=entry.name,
                uid=entry.uid,
                labels=self.attempt.labels,
            ),
            evidence=_Evidence(work=self, entry=entry, kind=kind),
            guard=self.guard,
            confirm_gone=True,
            capture_terminating=True,
            found=self.seen.pop(entry.name, None) if kind == "pod" else None,
        )
        return self._outcome(judged, entry=entry, kind=kind)

    def _outcome(
        self, judged: removal.Judged[None], *, entry: records.PinnedObject, kind: Kind
    ) -> records.RemovalOutcome:
        """The journal's outcome of a removal, or why this pass stops (raised)."""
        match judged.outcome:
            case "absent":
                return "absent_after_send" if entry.sent else "absent"
            case "replaced" | "unselected" | "deleted":
                return judged.outcome
            case "gone":
                return "absent_after_send"
            case "terminating" if entry.sent:
                return "deleted"  # Our delete is under way: it is never sent twice for a UID.
            case "terminating":
                metadata = (judged.found or {}).get("metadata") or {}
                raise terminating(kind=kind, name=entry.name, metadata=metadata, now=self.clock())
            case "listed":
                raise PassFailed(
                    f"{kind} {entry.name}: the API said it is gone or replaced, but a list shows it"
                )
            case "changed":
                raise PassFailed(
                    f"{kind} {entry.name} changed each time it was about to be deleted; "
                    "waiting for it to settle"
                )
            case _:
                assert judged.error is not None, judged  # Cleanup's evidence never keeps an object.
                raise judged.error

    async def capture(
        self, entry: records.PinnedObject, pod: dict[str, object]
    ) -> records.StartupCapture | None:
        metrics = self.runtime.metrics
        try:
            capture = await self.runtime.startup(pod, self.runtime.reader)
        except (errors.ApiRefused, ConnectionError, TimeoutError) as e:
            metrics.log_read_failures.labels(path="cleanup", cause=causes.of(e).name).inc()
            if not self._count_failed_read(entry, e):
                await self.save(before="noting a failed log read")
                raise PassFailed(self._failed_read_message(entry, e)) from e
            return await self._degraded(pod, entry, e)
        metrics.captures.labels(path="cleanup", result="stored").inc()
        if capture is not None:
            metrics_.count_capture(metrics, path="cleanup", capture=capture)
        return capture

    def _count_failed_read(self, entry: records.PinnedObject, error: BaseException) -> bool:
        """Note a failed read on the entry; whether ``LOG_READS`` counted failures are reached."""
        now = self.clock()
        first = _parse(entry.log_read_failed_at) or now
        entry.log_read_failed_at = entry.log_read_failed_at or finals.timestamp(now)
        entry.log_read_error = diagnostics.log_error(error)
        reads = entry.log_reads or 0
        if counted(causes.of(error), log_reads=reads, since_first=(now - first).total_seconds()):
            entry.log_reads = reads + 1
        return (entry.log_reads or 0) >= LOG_READS

    def _failed_read_message(self, entry: records.PinnedObject, error: BaseException) -> str:
        cause = causes.of(error)
        reads = entry.log_reads or 0
        spacing = ""
        if cause.may_pass and reads < len(COUNTED_AFTER):
            first = _parse(entry.log_read_failed_at) or self.clock()
            waited = (self.clock() - first).total_seconds()
            spacing = (
                f"; such failures count {', '.join(f'{s:g}' for s in COUNTED_AFTER)} s after the first "
                f"({waited:.0f} s ago)"
            )
        return (
            f"log read of pod {entry.name} failed ({cause.name}: {error}); log_reads {reads} of {LOG_READS}"
            f"{spacing}; the pod stays and the next pass retries: {cause.hint}"
        )

    async def _degraded(
        self, pod: dict[str, object], entry: records.PinnedObject, error: BaseException
    ) -> records.StartupCapture | None:
        """``LOG_READS`` counted failures: the capture keeps exit reasons only."""
        metrics = self.runtime.metrics
        capture = await self.runtime.startup(pod, self.runtime.reader, read_logs=False, failed_read=error)
        metrics.captures.labels(path="cleanup", result="degraded").inc()
        if capture is not None:
            metrics_.count_capture(metrics, path="cleanup", capture=capture)
        self.notify.warning(
            reason="LogsLost",
            message=f"Pod {entry.name}: logs lost, exit reasons kept "
            f"({LOG_READS} log reads failed: {error}; {causes.of(error).hint}).",
        )
        return capture


@dataclasses.dataclass(kw_only=True)
class _Evidence:
    """Cleanup's evidence of one pinned object: a refused Pod's capture, taken once and saved on
    its journal entry together with ``sent``, *before* the delete (the spec: saved, then sent)."""

    work: _Pass
    entry: records.PinnedObject
    kind: Kind

    async def keep(self, found: dict[str, Any], *, terminating: bool) -> None:
        entry = self.entry
        captured = self.kind == "pod" and entry.startup is None and diagnostics.is_refused(found)
        if captured:
            entry.startup = await self.work.capture(entry, found)
        if terminating:  # Someone else deletes it: its capture is kept, no delete is sent.
            if captured:
                await self.work.save(before="saving the capture")
            return None
        entry.sent = True
        await self.work.save(before="saving the capture and recording the delete as sent")
        return None

    def judging_again(self) -> None:
        self.entry.sent = False  # Refused for a newer version of the same object: not sent.


def terminating(*, kind: Kind, name: str, metadata: dict[str, Any], now: datetime.datetime) -> Terminating:
    """Why a pass waits for an object someone else is deleting, and whether that is overdue: still
    there :data:`finals.STOP_OVERDUE_AFTER` seconds after its grace period ended (a finalizer, or
    a node that does not answer), it is reported as a stopped step."""
    left = finals.stop_due_in(metadata, at=now)
    if left is not None and left >= 0:
        return Terminating(
            f"{kind} {name} is being deleted, not by this cleanup; waiting for it to go", overdue=False
        )
    finalizers = metadata.get("finalizers") or []
    held = f"; its finalizers {finalizers} may hold it" if finalizers else "; its node may not answer"
    late = None if left is None else finals.STOP_OVERDUE_AFTER - left
    since = "after its grace period ended" if late is None else f"{late:.0f} s after its grace period ended"
    return Terminating(
        f"{kind} {name} is being deleted, not by this cleanup, and is still there {since}{held}; "
        "waiting for it to go",
        overdue=True,
    )


def _parse(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _look_alikes(
    *, runtime: model.Runtime, attempt: model.Attempt, notify: events.Events | None, names: list[str]
) -> None:
    """Objects with the attempt's labels that its Execution does not own: left alone, and said."""
    if not names:
        return
    runtime.metrics.look_alike_pods.labels(path="cleanup").inc(len(names))
    message = (
        f"Left alone {', '.join(sorted(names))}: labelled as attempt {attempt.generation}'s, but not "
        f"owned by Execution {attempt.execution} (uid {attempt.owner_uid}); cleanup neither captures "
        "nor deletes them"
    )
    logger.warning("Cleanup of %s/%s: %s.", attempt.namespace, attempt.execution, message)
    if notify is not None:
        notify.warning(reason="LookAlikePod", message=message + ".")


def _watched_pods(
    *, runtime: model.Runtime, attempt: model.Attempt, gone: frozenset[str]
) -> list[dict[str, Any]] | None:
    """The attempt's Pods to pin, without a list: None when they must be listed.

    The operator makes one Pod per attempt, under the attempt's name, and records its UID in the
    hand (``attempt.pod_uid``); only what the attempt owns is ever pinned. So every Pod the operator
    made for the attempt is the hand's Pod, pinned here whatever the watch shows (a Pod the watch
    has not seen yet is pinned all the same; one gone since is found ``absent`` by its removal's
    read), unless its launch removal removed it (``gone``: that UID is gone for good, its capture
    stored). The watch adds the Pod now under the attempt's name when it is the attempt's own under
    another UID. An attempt known by its labels alone (launched by a version that recorded no
    UID), or a watch out of sync, is listed as before; so are look-alikes, which a list reports.
    """
    if attempt.labels_only or not attempt.pod_uid or runtime.workers is None:
        return None
    seen = runtime.workers.seen(namespace=attempt.namespace, name=attempt.pod_name)
    if not seen.known:
        return None
    found: dict[str, dict[str, Any]] = {}
    if attempt.pod_uid not in gone:
        found[attempt.pod_uid] = {"metadata": {"name": attempt.pod_name, "uid": attempt.pod_uid}}
    if seen.pod is not None and seen.pod.uid not in gone:
        watched_pod = seen.pod.as_object()
        if not attempt.owns(watched_pod):
            return None  # Not plainly the attempt's: a list judges it (and reports a look-alike).
        found[seen.pod.uid] = watched_pod
    return list(found.values())


class Unwritten(records.Journal):
    """The journal entry of a pass that found nothing to pin: not written to Redis. Its retain
    requires that no entry exists, so a pass that pinned something meanwhile wins, as it would
    have had this entry been written first (its pin would then have found this empty one)."""


async def owned_pods(*, runtime: model.Runtime, attempt: model.Attempt) -> list[dict[str, Any]]:
    """The attempt's Pods its Execution owns, listed live by the attempt's labels (look-alikes left
    out). Raises what the list raises."""
    listed = await runtime.cluster.pods.list(
        namespace=attempt.namespace, selector=labels.selector(attempt.labels)
    )
    return [p for p in listed if attempt.owns(p)]


async def pin(
    *,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    guard: model.Guard,
    attempt: model.Attempt,
    seen: dict[str, dict[str, Any]] | None = None,
    stored: records.Journal | None = None,
    notify: events.Events | None = None,
    gone: frozenset[str] = frozenset(),
) -> records.Journal | records.Retained:
    """The attempt's journal entry: ``stored`` (read by the caller in this pass), or a new one
    pinning what exists now; or the retained record, when another pass retained first.

    The Pods listed for a new entry are added to ``seen`` (by name), for the removal that follows.
    ``gone``: UIDs of the attempt's Pods that its launch removal removed (see :func:`_watched_pods`).
    """
    if stored is not None:
        return stored
    selector = labels.selector(attempt.labels)
    watched_pods = _watched_pods(runtime=runtime, attempt=attempt, gone=gone)
    if watched_pods is not None:
        listed = found_pods = watched_pods
    else:
        listed = await runtime.cluster.pods.list(namespace=attempt.namespace, selector=selector)
        # The labels are anyone's to write: only what the Execution owns is pinned (captured, deleted).
        found_pods = [p for p in listed if attempt.owns(p)]
        if seen is not None:
            seen.update(
                {str(p["metadata"]["name"]): p for p in found_pods if isinstance(p.get("metadata"), dict)}
            )
    pod_uids = {str(p["metadata"]["uid"]) for p in found_pods} | (
        {attempt.pod_uid} if attempt.pod_uid else set()
    )
    services = (
        []  # The launch made no terminal Service: its template had no port.
        if attempt.terminal is False and not attempt.labels_only
        else await runtime.cluster.services.list(namespace=attempt.namespace, selector=selector)
    )
    found_services = [s for s in services if attempt.labels_only or owners.owner_uids(s) & pod_uids]
    _look_alikes(
        runtime=runtime,
        attempt=attempt,
        notify=notify,
        names=[_name(o) for o in [*listed, *services] if o not in found_pods and o not in found_services],
    )

    def pinned(items: list[dict[str, object]]) -> list[records.PinnedObject]:
        return [
            records.PinnedObject(name=str(meta.get("name")), uid=str(meta.get("uid")))
            for meta in (item.get("metadata") for item in items)
            if isinstance(meta, dict)
        ]

    objects = records.Objects(pods=pinned(found_pods), services=pinned(found_services))
    kind = records.Journal if objects.pods or objects.services else Unwritten
    entry = kind(execution=attempt.execution, generation=attempt.generation, pinned=objects)
    if isinstance(entry, Unwritten):
        return entry
    guard.check(before="pinning the attempt's objects")
    return await store.pin_journal(slug=attempt.slug, journal=entry, life=attempt.owner_uid)


async def run(
    *,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    guard: model.Guard,
    attempt: model.Attempt,
    final: records.FinalRecord,
    watermark: int,
    archived: bool,
    notify: events.Events,
    seen: dict[str, dict[str, Any]] | None = None,
    journal: records.Journal | None = None,
    gone: frozenset[str] = frozenset(),
) -> records.Retained:
    """One cleanup pass to the end, or an exception that leaves the journal for the next pass.

    ``seen`` holds Pods the caller read in this same pass, by name (see :class:`_Pass`);
    ``journal`` the journal entry when the caller read one in this same pass.
    Returns the retained record: this pass's, or the one another pass stored first.
    Raises :class:`PassFailed` (retry later), ``ApiError``/``StoreUnavailable``/``StaleWrite``
    (retry later, reading the records again) or ``NotLeader`` (stop: another replica leads).
    """
    seen = dict(seen or {})
    pinned = await pin(
        runtime=runtime,
        store=store,
        guard=guard,
        attempt=attempt,
        seen=seen,
        stored=journal,
        notify=notify,
        gone=gone,
    )
    if isinstance(pinned, records.Retained):
        return pinned
    work = _Pass(
        runtime=runtime,
        store=store,
        guard=guard,
        attempt=attempt,
        notify=notify,
        journal=pinned,
        seen=seen,
    )
    await _remove_pinned(work)
    retained = records.Retained(
        execution=attempt.execution,
        final=final,
        watermark=watermark,
        archived=archived,
        removed=pinned.removed,
    )
    guard.check(before="moving the journal to attempt-retained")
    stored = await store.retain(
        slug=attempt.slug,
        retained=retained,
        journal_version=None if isinstance(pinned, Unwritten) else pinned.version or 0,
        life=attempt.owner_uid,
    )
    if stored is not retained:
        return stored
    outcomes = ", ".join(
        f"{r.name}: {r.outcome}"
        + (f" (class {r.startup.failure_class})" if r.startup and r.startup.failure_class else "")
        for r in [*pinned.removed.pods, *pinned.removed.services]
    )
    notify.normal(
        reason="CleanupFinished",
        message=f"Attempt {attempt.generation} cleaned up ({outcomes or 'nothing left'})"
        + ("" if archived else "; the transcript archive deadline passed first"),
    )
    return retained


async def _remove_pinned(work: _Pass) -> None:
    """Give every pinned object an outcome, saving the journal after each."""
    journal, attempt = work.journal, work.attempt
    kinds: tuple[tuple[Kind, list[records.PinnedObject], list[records.RemovedObject]], ...] = (
        ("pod", journal.pinned.pods, journal.removed.pods),
        ("service", journal.pinned.services, journal.removed.services),
    )
    for kind, pinned, removed in kinds:
        done = {(r.name, r.uid) for r in removed}
        for entry in pinned:
            if (entry.name, entry.uid) in done:
                continue
            outcome = await work.remove(entry, kind)
            removed.append(
                records.RemovedObject(
                    name=entry.name,
                    uid=entry.uid,
                    outcome=outcome,
                    startup=entry.startup,
                    log_reads=entry.log_reads,
                )
            )
            if kind == "pod":
                work.runtime.metrics.pods_removed.labels(path="cleanup", outcome=outcome).inc()
            logger.info(
                "Cleanup of %s: %s %s (uid %s) is %s.",
                attempt.execution,
                kind,
                entry.name,
                entry.uid,
                outcome,
            )
            await work.save()
