"""An attempt after its launch: become final, wait for the archive, clean up.

:func:`advance` moves one attempt as far as it can and returns a :class:`model.Progress` for its
Execution's status, so ``kubectl get executions`` shows what the attempt waits for. Its only
caller is :func:`lifecycle.step`, which never runs two steps of one Execution at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from agentihooks_swarm import errors, metrics, records
from agentihooks_swarm.capture import diagnostics, redaction
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import cleanup, events, finals, model, watched
from agentihooks_swarm.lifecycle.model import Phase, Progress
from agentihooks_swarm.storage import keys, operations

#: The reason of an attempt ended because its Pod was never scheduled in its startup deadline.
UNSCHEDULABLE = "Unschedulable"
#: The reason while the kubelet is failing a Pod past its startup deadline.
STARTUP_DEADLINE = "StartupDeadlineExceeded"
#: The reason of an attempt ended because someone else deleted its worker Pod and no kubelet
#: stopped it (:func:`finals.stopping`).
WORKER_POD_DELETED = "WorkerPodDeleted"

#: What a pass waits for while the worker runs (the launch writes it with the hand).
WORKER_RUNNING = "the worker to finish"


class Interrupted(errors.SwarmError):
    """A step stopped before the attempt's cleanup began: reading its records or its worker Pod,
    or recording it final, failed (``error``). No cleanup pass ran, so the attempt is where the
    last step left it, and its Execution's phase says so still."""

    def __init__(self, error: errors.ApiError | errors.StoreUnavailable) -> None:
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def _before_cleanup() -> Iterator[None]:
    try:
        yield
    except (errors.ApiError, errors.StoreUnavailable) as e:
        raise Interrupted(e) from e


async def advance(
    *,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    guard: model.Guard,
    attempt: model.Attempt,
    hand: records.HandResult,
    cancelled: bool,
    deadline_seconds: float,
    notify: events.Events,
    looked: dict[str, Any] | None = None,
) -> Progress:
    """Move the attempt on; raises what :func:`cleanup.run` raises when a cleanup pass fails,
    and :class:`Interrupted` when the step fails before its cleanup began. The attempt's records
    are read once, together, at the start of the step (one round trip). ``looked``: the worker
    Pod as the launch saw it in this same step (:attr:`launch.Launched.pod`)."""
    with _before_cleanup():
        stored = await store.read_attempt(slug=attempt.slug, execution=attempt.execution)
    retained = stored.retained
    if retained is not None:
        if stored.journal is not None:
            guard.check(before="removing a journal entry left beside the retained record")
            await store.clear_journal(slug=attempt.slug, execution=attempt.execution)
        return _finished(stored=stored, retained=retained)
    seen: dict[str, dict[str, Any]] = {}
    with _before_cleanup():
        final = stored.final
        if final is None:
            found = await _become_final(
                runtime=runtime,
                store=store,
                guard=guard,
                attempt=attempt,
                hand=hand,
                cancelled=cancelled,
                stored=stored,
                notify=notify,
                seen=seen,
                looked=looked,
            )
            if isinstance(found, Progress):
                return found
            final = found
        guard.check(before="recording the outcome")
        await _record_outcome(store=store, attempt=attempt, final=final)
    ready = finals.readiness(
        final=final, heartbeat=stored.heartbeat, deadline_seconds=deadline_seconds, at=finals.now()
    )
    if not ready.ready:
        return Progress(
            phase=Phase.ARCHIVING,
            outcome=final.state,
            waiting_for=ready.waiting_for,
            reason=final.reason or "",
            message=_final_message(final),
            failure_class=final.evidence.failure_class if final.evidence is not None else None,
        )
    retained = await cleanup.run(
        runtime=runtime,
        store=store,
        guard=guard,
        attempt=attempt,
        final=final,
        watermark=ready.watermark,
        archived=ready.archived,
        notify=notify,
        seen=seen,
        journal=stored.journal,
        gone=_removed_at_launch(hand),
    )
    return _finished(stored=stored, retained=retained)


async def _record_outcome(
    *, store: operations.AsyncStore, attempt: model.Attempt, final: records.FinalRecord
) -> None:
    """The controller's outcome of a final attempt, unless the worker reported one first."""
    await store.record_outcome(
        slug=attempt.slug,
        outcome=records.Outcome(
            execution=attempt.execution,
            generation=attempt.generation,
            success=final.state == records.FinalState.COMPLETED,
            summary=f"recorded by the controller: the attempt is {final.state}",
            at=finals.timestamp(finals.now()),
        ),
        life=attempt.owner_uid,
    )


async def _become_final(
    *,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    guard: model.Guard,
    attempt: model.Attempt,
    hand: records.HandResult,
    cancelled: bool,
    stored: operations.AttemptRecords,
    notify: events.Events,
    seen: dict[str, dict[str, Any]],
    looked: dict[str, Any] | None = None,
) -> records.FinalRecord | Progress:
    """The attempt's final record (written once now, or an earlier one), or the progress of an
    attempt that is not final yet."""
    unread = _not_ended(
        runtime=runtime, attempt=attempt, hand=hand, cancelled=cancelled, stored=stored, looked=looked
    )
    if unread is not None:
        return unread
    pod = await _read_worker(runtime=runtime, attempt=attempt, hand=hand) if hand.handed else None
    if isinstance(pod, dict) and not attempt.owns(pod):
        pod = None  # A look-alike under the worker's name is not the worker: the worker is gone.
    if pod is not None:
        seen[hand.pod] = pod
    state = finals.final_state(hand=hand, pod=pod, cancelled=cancelled, outcome=stored.outcome)
    ending = _Ending(state=state)
    if state is None and pod is not None:
        judged = await _unended(runtime=runtime, guard=guard, attempt=attempt, pod=pod, notify=notify)
        if isinstance(judged, Progress):
            return judged
        ending = judged
    if ending.state is None:
        pod_phase = ((pod or {}).get("status") or {}).get("phase")
        return Progress(
            phase=Phase.of_pod(pod_phase),
            waiting_for=WORKER_RUNNING,
            # Not before every container started: a startup deadline may still need a step.
            waits_for_pod=pod is not None and finals.started(pod),
        )
    state, reason, evidence, late = ending.state, ending.reason, ending.evidence, ending.late
    heartbeat = stored.heartbeat
    guard.check(before="recording the final record")
    final = await store.record_final(
        slug=attempt.slug,
        life=attempt.owner_uid,
        final=records.FinalRecord(
            execution=attempt.execution,
            generation=attempt.generation,
            state=state,
            transcript_end=heartbeat.transcript if heartbeat is not None else 0,
            outcome=store.key(attempt.slug, keys.OUTCOMES),
            at=finals.timestamp(finals.now()),
            reason=reason,
            evidence=evidence,
        ),
    )
    if evidence is not None and late is not None and final.evidence is evidence:  # Ours was stored.
        _unschedulable(runtime=runtime, attempt=attempt, evidence=evidence, late=late, notify=notify)
    if reason == WORKER_POD_DELETED and final.evidence is evidence:
        _deleted_unstopped(attempt=attempt, notify=notify)
    notify.normal(
        reason="AttemptFinal",
        message=f"Attempt {attempt.generation} is final: {final.state}"
        + (f" ({final.reason})." if final.reason else "."),
    )
    return final


async def _read_worker(
    *, runtime: model.Runtime, attempt: model.Attempt, hand: records.HandResult
) -> dict[str, Any] | None:
    """The handed worker's Pod: as the watch kept it once terminal (:meth:`watched.WorkerPod.terminal`),
    when that is the attempt's own; else read now."""
    seen = runtime.workers.seen(namespace=attempt.namespace, name=hand.pod) if runtime.workers else None
    kept = seen.pod.terminal() if seen is not None and seen.pod is not None else None
    if kept is not None and attempt.owns(kept):
        return kept
    return await runtime.cluster.pods.read(namespace=attempt.namespace, name=hand.pod)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Ending:
    """How an attempt ends: its final state (None: not yet), and why, when its Pod says so."""

    state: records.FinalState | None
    reason: str | None = None
    evidence: records.StartupCapture | None = None
    late: finals.Overdue | None = None


async def _unended(
    *,
    runtime: model.Runtime,
    guard: model.Guard,
    attempt: model.Attempt,
    pod: dict[str, Any],
    notify: events.Events,
) -> _Ending | Progress:
    """A handed worker whose Pod has not ended: what its deletion by someone else
    (:func:`finals.stopping`) or its startup deadline (:func:`finals.overdue`) makes of it."""
    left = finals.stopping(pod, at=finals.now())
    if left is not None and left > 0:  # Its kubelet is stopping it: the Pod ends Failed or Succeeded.
        return Progress(
            phase=Phase.of_pod((pod.get("status") or {}).get("phase")),
            waiting_for="the kubelet to stop the worker pod someone else deleted",
            retry_after=left + 1.0,
        )
    if left is not None:
        return _Ending(
            state=records.FinalState.FAILED,
            reason=WORKER_POD_DELETED,
            evidence=await _evidence(runtime, pod),
        )
    late = finals.overdue(pod, default=runtime.startup_deadline_seconds, at=finals.now())
    if late is not None and late.scheduled:
        return await _fail_by_kubelet(
            runtime=runtime, guard=guard, attempt=attempt, pod=pod, late=late, notify=notify
        )
    if late is not None:
        return _Ending(
            state=records.FinalState.FAILED,
            reason=UNSCHEDULABLE,
            evidence=await _evidence(runtime, pod),
            late=late,
        )
    return _Ending(state=None)


async def _evidence(runtime: model.Runtime, pod: dict[str, Any]) -> records.StartupCapture:
    """The final record's evidence of a Pod that is not refused (no logs), redacted as stored."""
    evidence = await diagnostics.evidence(pod, runtime.cluster.pods)
    if runtime.store_redactor is not None:  # AGENTIHOOKS_SWARM_STORE_REDACTED
        evidence = redaction.capture(evidence, redactor=runtime.store_redactor)
    return evidence


def _deleted_unstopped(*, attempt: model.Attempt, notify: events.Events) -> None:
    notify.warning(
        reason=WORKER_POD_DELETED,
        message=f"Worker pod {attempt.pod_name} was deleted, not by this operator, and its kubelet has "
        f"not stopped it {finals.STOP_OVERDUE_AFTER:g}s after its grace period ended (its node may not "
        "answer); the attempt ends failed, and the pod is released once cleanup has judged it.",
    )


def _removed_at_launch(hand: records.HandResult) -> frozenset[str]:
    """The UID of the Pod a refused hand's launch removal removed (gone for good), if it did."""
    return frozenset({hand.pod_uid}) if not hand.handed and hand.removed and hand.pod_uid else frozenset()


def _not_ended(
    *,
    runtime: model.Runtime,
    attempt: model.Attempt,
    hand: records.HandResult,
    cancelled: bool,
    stored: operations.AttemptRecords,
    looked: dict[str, Any] | None,
) -> Progress | None:
    """The progress of a worker plainly still going, judged without reading its Pod; None when the
    Pod must be read (see :mod:`.watched`). Only a worker that nothing but its Pod can end (handed,
    not cancelled, no successful outcome reported) is judged so: from the launch's own view of the
    Pod in the step that launched it (not ended: Pending or Running, no container terminated), or
    from the watch (running, every container running; or not ended, not started and within its
    startup deadline). A Pod that ends after the view was taken is a change of the Pod, which the
    watch brings and which wakes the next step; a deadline that passes is seen by a later step."""
    if not hand.handed or cancelled or (stored.outcome is not None and stored.outcome.success):
        return None
    if looked is not None:
        found = watched.digest(looked)
        if watched.ended(found):
            return None
        return Progress(phase=Phase.of_pod(found[1]), waiting_for=WORKER_RUNNING)
    seen = (
        runtime.workers.seen(namespace=attempt.namespace, name=hand.pod)
        if runtime.workers
        else watched.UNKNOWN
    )
    pod = seen.pod
    if pod is None or not attempt.owns(pod.as_object()):
        return None
    if pod.running():
        return Progress(phase=Phase.RUNNING, waiting_for=WORKER_RUNNING, waits_for_pod=True)
    if watched.ended(pod.digest) or not finals.within_deadline(
        created=pod.created,
        annotation=pod.deadline,
        default=runtime.startup_deadline_seconds,
        at=finals.now(),
    ):
        return None
    # Not started yet: not parked (waits_for_pod False), so the resync judges its deadline again.
    return Progress(phase=Phase.of_pod(pod.digest[1]), waiting_for=WORKER_RUNNING)


def _finished(*, stored: operations.AttemptRecords, retained: records.Retained) -> Progress:
    """Done; a refused hand's class comes from launch removal's record (its Pod is gone by cleanup)."""
    progress = _done(retained)
    captured = [
        model.Captured(pod=r.name, uid=r.uid, capture=r.startup) for r in retained.removed.pods if r.startup
    ]
    record = stored.startup
    if record is not None and record.uid not in {c.uid for c in captured}:
        captured.insert(0, model.Captured(pod=record.pod, uid=record.uid, capture=record.startup))
    refused = retained.final.state == records.FinalState.REFUSED
    if progress.failure_class is None and refused and record is not None and record.startup.failure_class:
        progress = dataclasses.replace(progress, failure_class=str(record.startup.failure_class))
    return dataclasses.replace(progress, captures=tuple(captured))


def _done(retained: records.Retained) -> Progress:
    final = retained.final
    found = [p.startup.failure_class for p in retained.removed.pods if p.startup is not None]
    if final.evidence is not None:
        found.append(final.evidence.failure_class)
    return Progress(
        phase=Phase.DONE,
        outcome=final.state,
        retained=retained,
        reason=final.reason or "",
        message=_final_message(final),
        failure_class=next((str(c) for c in found if c is not None), None),
    )


def _final_message(final: records.FinalRecord) -> str:
    if not final.reason:
        return ""
    detail = diagnostics.summary(final.evidence) if final.evidence is not None else ""
    return f"The attempt ended {final.state}: {final.reason}" + (f" ({detail})." if detail else ".")


async def _fail_by_kubelet(
    *,
    runtime: model.Runtime,
    guard: model.Guard,
    attempt: model.Attempt,
    pod: dict[str, Any],
    late: finals.Overdue,
    notify: events.Events,
) -> Progress:
    """Past its startup deadline on a node: set ``activeDeadlineSeconds`` once; the kubelet fails it."""
    pod_phase = (pod.get("status") or {}).get("phase")
    why = diagnostics.summary(
        records.StartupCapture(
            phase=str(pod_phase or "Pending"),
            reason="",
            containers=[],
            waiting=diagnostics.waiting(pod) or None,
            conditions=diagnostics.conditions(pod) or None,
        )
    )
    message = (
        f"Worker pod {attempt.pod_name}: containers not all started within {late.deadline}s ({why}); "
        f"activeDeadlineSeconds={late.active_deadline} is set so its kubelet fails it (DeadlineExceeded)"
    )
    if not late.deadline_set:
        guard.check(before=f"setting the startup deadline of pod {attempt.pod_name}")
        await runtime.cluster.pods.set_active_deadline(
            namespace=attempt.namespace,
            name=attempt.pod_name,
            uid=str((pod.get("metadata") or {}).get("uid")),
            seconds=late.active_deadline,
            notes={labels.WAITING_AT_DEADLINE: diagnostics.note_waiting(pod)},
            has_annotations=bool((pod.get("metadata") or {}).get("annotations")),
        )
        runtime.metrics.startup_deadlines.labels(action="deadline_set").inc()
        notify.warning(reason=STARTUP_DEADLINE, message=message + ".")
    return Progress(
        phase=Phase.of_pod(pod_phase),
        waiting_for="the kubelet to fail the pod past its startup deadline",
        reason=STARTUP_DEADLINE,
        message=message,
    )


def _unschedulable(
    *,
    runtime: model.Runtime,
    attempt: model.Attempt,
    evidence: records.StartupCapture,
    late: finals.Overdue,
    notify: events.Events,
) -> None:
    """Never scheduled within the deadline, and now recorded: count it and say so, once."""
    runtime.metrics.startup_deadlines.labels(action="unschedulable").inc()
    metrics.count_capture(runtime.metrics, path="deadline", capture=evidence)
    notify.warning(
        reason=UNSCHEDULABLE,
        message=f"Worker pod {attempt.pod_name} was not scheduled within its startup deadline of "
        f"{late.deadline}s ({diagnostics.summary(evidence)}); the attempt ends failed, the pod is deleted.",
    )
