"""An attempt after its launch: become final, wait for the archive, clean up.

:func:`advance` is called on every controller pass over an Execution (a kopf timer, and the
delete handler). Each call moves the attempt as far as it can and returns a :class:`Progress`
that the handler writes to the Execution's status, so ``kubectl get executions`` shows what the
attempt waits for.
"""

from __future__ import annotations

import dataclasses

from agentihooks_swarm import cleanup, events, finals, launch, records, store as store_


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    phase: str
    outcome: str | None = None
    waiting_for: str = ""
    retained: records.Retained | None = None

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
    """Move the attempt on; raises what :func:`cleanup.run` raises when a cleanup pass fails."""
    retained = await store.read_retained(slug=attempt.slug, execution=attempt.execution)
    if retained is not None:
        return Progress(phase="Done", outcome=retained.final.state, retained=retained)
    final = await store.read_final(slug=attempt.slug, execution=attempt.execution)
    if final is None:
        pod = await runtime.pods.read(namespace=attempt.namespace, name=hand.pod) if hand.handed else None
        reported = await store.read_outcome(slug=attempt.slug, execution=attempt.execution)
        state = finals.final_state(hand=hand, pod=pod, cancelled=cancelled, outcome=reported)
        if state is None:
            phase = str(((pod or {}).get("status") or {}).get("phase") or "Pending")
            return Progress(phase=phase, waiting_for="the worker to finish")
        heartbeat = await store.read_heartbeat(slug=attempt.slug, execution=attempt.execution)
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
            ),
        )
        notify.normal(reason="AttemptFinal", message=f"Attempt {attempt.generation} is final: {final.state}.")
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
    heartbeat = await store.read_heartbeat(slug=attempt.slug, execution=attempt.execution)
    ready = finals.readiness(
        final=final, heartbeat=heartbeat, deadline_seconds=deadline_seconds, at=finals.now()
    )
    if not ready.ready:
        return Progress(phase="Archiving", outcome=final.state, waiting_for=ready.waiting_for)
    retained = await cleanup.run(
        runtime=runtime,
        store=store,
        guard=guard,
        attempt=attempt,
        final=final,
        watermark=ready.watermark,
        archived=ready.archived,
        notify=notify,
    )
    return Progress(phase="Done", outcome=final.state, retained=retained)
