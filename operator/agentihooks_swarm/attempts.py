"""An attempt after its launch: become final, wait for the archive, clean up.

:func:`advance` is called on every controller pass over an Execution (:mod:`passes`, and the
delete handler). Each call moves the attempt as far as it can and returns a :class:`Progress`
that the handler writes to the Execution's status, so ``kubectl get executions`` shows what the
attempt waits for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentihooks_swarm import cleanup, events, finals, launch, metrics, records, store as store_
from agentihooks_swarm.kubernetes import diagnostics, labels

#: The reason of an attempt ended because its Pod was never scheduled in its startup deadline.
UNSCHEDULABLE = "Unschedulable"
#: The reason while the kubelet is failing a Pod past its startup deadline.
STARTUP_DEADLINE = "StartupDeadlineExceeded"

#: What a pass waits for while the worker runs (the create handler writes it with the hand).
WORKER_RUNNING = "the worker to finish"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    phase: str
    outcome: str | None = None
    waiting_for: str = ""
    retained: records.Retained | None = None
    #: Why the attempt is ending or ended the way it does (``StartupDeadlineExceeded``,
    #: ``Unschedulable``), with a sentence for the Execution's status.
    reason: str = ""
    message: str = ""
    #: The failure class of the attempt's captured Pod (or of its final record's evidence).
    failure_class: str | None = None

    @property
    def done(self) -> bool:
        return self.retained is not None


async def advance(
    *,
    runtime: launch.Runtime,
    store: store_.AsyncStore,
    guard: cleanup.Guard,
    attempt: launch.Attempt,
    hand: records.HandResult,
    cancelled: bool,
    deadline_seconds: float,
    notify: events.Events,
) -> Progress:
    """Move the attempt on; raises what :func:`cleanup.run` raises when a cleanup pass fails.

    The attempt's records are read once, together, at the start of the pass (one round trip).
    """
    stored = await store.read_attempt(slug=attempt.slug, execution=attempt.execution)
    retained = stored.retained
    if retained is not None:
        return _finished(stored=stored, retained=retained)
    final = stored.final
    seen: dict[str, dict[str, Any]] = {}
    if final is None:
        pod = await runtime.pods.read(namespace=attempt.namespace, name=hand.pod) if hand.handed else None
        if pod is not None:
            seen[hand.pod] = pod
        reported = stored.outcome
        state = finals.final_state(hand=hand, pod=pod, cancelled=cancelled, outcome=reported)
        reason: str | None = None
        evidence: records.StartupCapture | None = None
        late: finals.Overdue | None = None
        if state is None and pod is not None:
            late = finals.overdue(pod, default=runtime.startup_deadline_seconds, at=finals.now())
            if late is not None and late.scheduled:
                return await _fail_by_kubelet(
                    runtime=runtime, guard=guard, attempt=attempt, pod=pod, late=late, notify=notify
                )
            if late is not None:
                state, reason = records.FinalState.FAILED, UNSCHEDULABLE
                evidence = await diagnostics.evidence(pod, runtime.pods)
        if state is None:
            phase = str(((pod or {}).get("status") or {}).get("phase") or "Pending")
            return Progress(phase=phase, waiting_for=WORKER_RUNNING)
        heartbeat = stored.heartbeat
        guard.check(before="recording the final record")
        final = await store.record_final(
            slug=attempt.slug,
            final=records.FinalRecord(
                execution=attempt.execution,
                generation=attempt.generation,
                state=state,
                transcript_end=heartbeat.transcript if heartbeat is not None else 0,
                outcome=store.key(attempt.slug, store_.OUTCOMES),
                at=finals.timestamp(finals.now()),
                reason=reason,
                evidence=evidence,
            ),
        )
        if evidence is not None and late is not None and final.evidence is evidence:  # Ours was stored.
            _unschedulable(runtime=runtime, attempt=attempt, evidence=evidence, late=late, notify=notify)
        notify.normal(
            reason="AttemptFinal",
            message=f"Attempt {attempt.generation} is final: {final.state}"
            + (f" ({final.reason})." if final.reason else "."),
        )
    guard.check(before="recording the outcome")
    await store.record_outcome(
        slug=attempt.slug,
        outcome=records.Outcome(
            execution=attempt.execution,
            generation=attempt.generation,
            success=final.state == records.FinalState.COMPLETED,
            summary=f"recorded by the controller: the attempt is {final.state}",
            at=finals.timestamp(finals.now()),
        ),
    )
    heartbeat = stored.heartbeat
    ready = finals.readiness(
        final=final, heartbeat=heartbeat, deadline_seconds=deadline_seconds, at=finals.now()
    )
    if not ready.ready:
        return Progress(
            phase="Archiving",
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
    )
    return _finished(stored=stored, retained=retained)


def _finished(*, stored: store_.AttemptRecords, retained: records.Retained) -> Progress:
    """Done; a refused hand's class comes from launch removal's record (its Pod is gone by cleanup)."""
    progress = _done(retained)
    if progress.failure_class is None and retained.final.state == records.FinalState.REFUSED:
        record = stored.startup
        if record is not None and record.startup.failure_class is not None:
            return dataclasses.replace(progress, failure_class=str(record.startup.failure_class))
    return progress


def _done(retained: records.Retained) -> Progress:
    final = retained.final
    found = [p.startup.failure_class for p in retained.removed.pods if p.startup is not None]
    if final.evidence is not None:
        found.append(final.evidence.failure_class)
    return Progress(
        phase="Done",
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
    runtime: launch.Runtime,
    guard: cleanup.Guard,
    attempt: launch.Attempt,
    pod: dict[str, Any],
    late: finals.Overdue,
    notify: events.Events,
) -> Progress:
    """Past its startup deadline on a node: set ``activeDeadlineSeconds`` once; the kubelet fails it."""
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    why = diagnostics.summary(
        records.StartupCapture(
            phase=phase,
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
        await runtime.pods.set_active_deadline(
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
        phase=phase,
        waiting_for="the kubelet to fail the pod past its startup deadline",
        reason=STARTUP_DEADLINE,
        message=message,
    )


def _unschedulable(
    *,
    runtime: launch.Runtime,
    attempt: launch.Attempt,
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
