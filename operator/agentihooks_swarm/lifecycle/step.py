"""One step of one Execution's lifecycle: the only code that launches or advances an attempt.

Every trigger — a new Execution, a change of its spec or relaunch annotation, its deletion, the
periodic resync, a restart — ends in :meth:`Lifecycle.step`, called by the reconciler's workers,
which never run two steps of one Execution at once (:mod:`controller.workqueue`). A step reads what it needs
(the records in one round trip, the worker Pod), acts, and then writes the Execution once: one
status patch that only applies to the Execution it read (its UID), the operator's finalizer, and
its Events. So there is one path for the status and one for the Events, whatever the trigger.

What a step does, by the Execution's state:

* not launched: pass the launch's gates (:mod:`.gates`: read and parse the spec, read the Swarm,
  hold it back while its Swarm's refusal budget is exceeded or its swarm is at its byte quota
  (``Blocked``), claim its name's records (:meth:`storage.operations.AsyncStore.claim`: a name
  another Execution used is refused, ``NameInUse``)), then create or adopt the worker Pod, hand it
  its grant (launch removal on a refused hand), record the hand;
* launched: :func:`attempts.advance` (final record, outcome, archive, final cleanup);
* being deleted: the same, cancelled; once cleanup is done (or there was never a worker), the
  finalizer goes and the Execution with it.

The operator's finalizer goes on the Execution in the write of the first step that leaves a
worker behind it (a worker running, or a cleanup still to do), so that deleting the Execution then
waits for the cleanup. An attempt that ends in the step that launched it (a refused hand whose Pod
launch removal captured and deleted) never needs it, and costs no finalizer round trip. Until the
finalizer is on, the worker Pod itself keeps its evidence: its Execution owns it and its evidence
finalizer holds it, so if the Execution goes first the garbage collector's delete waits for the
orphan pass (:mod:`controller.orphans`) to capture it.

Expected failures (the API server, Redis, a cleanup pass that must wait) become the status' answer
and a later step; ``NotLeader`` ends the step without a write; anything else propagates to the
reconciler, which logs and counts it and tries again later.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from agentihooks_swarm import errors, records
from agentihooks_swarm.kubernetes.labels import FINALIZER
from agentihooks_swarm.lifecycle import (
    attempts,
    cleanup,
    events,
    finals,
    gates,
    launch,
    model,
    quota as quota_,
    status as status_,
    watched,
    work as work_,
)
from agentihooks_swarm.lifecycle.model import Phase
from agentihooks_swarm.storage import keys, operations

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """What a step did, for the reconciler."""

    #: The Execution as the API server had it after the step's last write (None: nothing written).
    after: Mapping[str, Any] | None = None
    #: Not before this many seconds should the next step come (None: the next resync).
    retry_after: float | None = None
    #: Nothing more to do: Done, Invalid until it changes, or gone.
    settled: bool = False
    #: The worker runs: the next step may wait for a change of its Pod (see ``Progress``).
    waits_for_pod: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Lifecycle:
    runtime: model.Runtime
    store: operations.AsyncStore
    guard: model.Guard
    #: This replica, as its Events name it.
    instance: str
    archive_deadline_seconds: float
    #: Finalizers an earlier version put on Executions: released with the operator's own.
    legacy_finalizers: frozenset[str] = frozenset()
    #: The swarms' byte quota: at it, a swarm's new Executions wait (None: no quota).
    quota: quota_.Quota | None = None
    #: The swarms' worker Redis credentials, made before a launch (None: workers get none).
    credentials: model.Credentials | None = None
    #: The Swarms as watched (None: every launch reads its Swarm from the API server).
    swarms: watched.SwarmWatch | None = None

    @property
    def _gates(self) -> gates.Gates:
        return gates.Gates(
            runtime=self.runtime,
            store=self.store,
            guard=self.guard,
            quota=self.quota,
            credentials=self.credentials,
            swarms=self.swarms,
        )

    async def step(self, tracked: model.Tracked) -> Step:
        """Move one Execution as far as it can go now; see the module docstring."""
        work = work_.Work(tracked=tracked)
        try:
            await self._act(work)
        except errors.NotLeader:
            raise
        except Exception:
            if work.patch:  # What the step did before the surprise (a launched worker) is kept.
                await self._write(work)
            raise
        after = await self._write(work)
        return Step(
            after=after, retry_after=work.retry_after, settled=work.settled, waits_for_pod=work.waits_for_pod
        )

    async def _act(self, work: work_.Work) -> None:
        tracked = work.tracked
        if tracked.status.get("phase") == Phase.DONE:  # Deleted (or still held) once Done: let it go.
            work.release = work.settled = True
            return
        hand = tracked.hand()
        if hand is not None and _unrecorded(tracked.status):
            await self._record_hand(work, hand)
        if hand is None and (tracked.deleting or tracked.gone):
            hand = await self._unlaunched(work)
        elif hand is None:
            quiet = tracked.status.get("phase") == Phase.INVALID and not status_.changed_since_launch(
                tracked.status, generation=tracked.spec_generation, relaunch=tracked.relaunch
            )
            if quiet:
                work.settled = True
                return
            hand = await self._launch(work)
        if hand is not None:
            work.hold = True
            await self._advance(work, hand)

    # --- launch ---------------------------------------------------------------------------------

    async def _launch(self, work: work_.Work) -> records.HandResult | None:
        """Launch the Execution's attempt once its gates let it (:mod:`.gates`); its hand result, or
        None when it was not launched (the status says why)."""
        known, recorded = await self._gates.recorded(work)
        if not known or recorded is not None:
            return recorded
        cleared = await self._gates.clear(work)
        if cleared is None:
            return None
        return await self._hand(work, cleared)

    async def _hand(self, work: work_.Work, cleared: gates.Cleared) -> records.HandResult | None:
        tracked = work.tracked
        try:
            launched = await launch.launch(
                runtime=self.runtime,
                attempt=tracked.attempt(),
                swarm=cleared.swarm,
                execution=cleared.execution,
                notify=work.notes,
                guard=self.guard,
                credential=cleared.credential,
            )
        except errors.SpecRejected as e:
            answer = status_.rejected(e, swarm_stamp=cleared.stamp)
            work.answer(answer, **work.observed())
            work.notes.warning(reason=answer.conditions[0]["reason"], message=str(e))
            work.settled = True
            return None
        except launch.ForeignPod as e:
            # Said once while it lasts: the step retries every minute, the Event would too.
            first = work.view.get("phase") != Phase.BLOCKED
            work.answer(status_.pod_name_taken(f"{e}; remove that pod to let this execution launch"))
            if e.look_alike and first:
                self.runtime.metrics.look_alike_pods.labels(path="launch").inc()
                work.notes.warning(reason="LookAlikePod", message=str(e))
            work.retry_after = work_.FOREIGN_POD_RETRY
            return None
        except errors.ApiError as e:
            work.answer(status_.launch_failed(e, retry_seconds=work_.LAUNCH_RETRY))
            work.retry_after = work_.LAUNCH_RETRY
            return None
        hand = launched.hand
        work.hold = True  # A Pod exists now, whether or not Redis takes its hand below.
        work.looked = launched.pod
        earlier = work.view.get("conditions")
        work.answer(status_.handed(hand, detail=launched.detail, earlier=earlier), **work.observed())
        if hand.handed:  # What the steps report until the worker ends: written once, here.
            work.patch["waitingFor"] = attempts.WORKER_RUNNING
        # The attempt goes on only from a hand held in Redis: if this step's status write fails
        # too, the next step finds the hand there (:meth:`gates.Gates.recorded`) instead of launching again.
        return hand if await self._record_hand(work, hand) else None

    async def _record_hand(self, work: work_.Work, hand: records.HandResult) -> bool:
        """The hand result in Redis (and a refused hand's final record); the status says whether it
        is there. A failed write is tried again by a later step, which finds the hand in the status."""
        tracked = work.tracked
        try:
            await self.store.save_hand(
                slug=tracked.swarm,
                execution=tracked.name,
                hand=hand,
                final=None
                if hand.handed
                else records.FinalRecord(
                    execution=tracked.name,
                    generation=hand.generation,
                    state=records.FinalState.REFUSED,
                    transcript_end=0,
                    outcome=self.store.key(tracked.swarm, keys.OUTCOMES),
                ),
            )
        except errors.StoreUnavailable as e:
            self.runtime.metrics.store_failures.labels(path="launch").inc()
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = work_.RECORD_RETRY
            return False
        status_.set_condition(work.patch, work.view.get("conditions"), status_.recorded())
        return True

    # --- after the launch -----------------------------------------------------------------------

    async def _unlaunched(self, work: work_.Work) -> records.HandResult | None:
        """A deleted Execution without a hand in its status: if it claimed its name, a launch may
        have created its worker before it was interrupted, so its attempt is cleaned up like any
        cancelled one; otherwise there is nothing of it to clean up and it may go."""
        tracked = work.tracked
        if not tracked.swarm:
            work.release = work.settled = True
            return None
        try:
            owner = await self.store.owner(slug=tracked.swarm, execution=tracked.name)
        except errors.StoreUnavailable as e:  # Unknown whether it launched: it stays until Redis says.
            self.runtime.metrics.store_failures.labels(path="cleanup").inc()
            logger.warning(
                "Deleted Execution %s/%s waits for Redis to say whether it launched: %s",
                tracked.namespace,
                tracked.name,
                e,
            )
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = work_.RECORD_RETRY
            return None
        if owner is None:
            left = await self._left_behind(work)
            if left is None:  # Unknown: it stays until the API server and Redis say.
                return None
            if not left:
                work.release = work.settled = True
                return None
        if owner is not None and owner.uid != tracked.uid:
            work.release = work.settled = True
            return None
        return records.HandResult(
            generation=tracked.attempt_number, handed=True, pod=tracked.attempt().pod_name
        )

    async def _left_behind(self, work: work_.Work) -> bool | None:
        """Whether the Execution left a worker Pod it owns, or a cleanup under way (its journal
        entry), though no claim of its name is in Redis: a failover can drop the claim a launch
        made before its Pod. Such a Pod holds the evidence finalizer, so it is cleaned up as any
        launched attempt's, never left held Terminating. None: unknown (a read failed)."""
        attempt = work.tracked.attempt()
        try:
            # Or the Pod gone already, by an earlier step of this cleanup: its journal carries it on.
            left = bool(await cleanup.owned_pods(runtime=self.runtime, attempt=attempt)) or (
                await self.store.read_journal(slug=attempt.slug, execution=attempt.execution) is not None
            )
            if not left:
                return False
            # The slug must be this namespace's (its launch claimed it so): records are never
            # written to another team's swarm.
            owner = await self.store.slugs.claim(slug=attempt.slug, namespace=attempt.namespace)
            return owner == attempt.namespace
        except (errors.ApiError, errors.StoreUnavailable) as e:
            logger.warning(
                "Deleted Execution %s/%s waits to see whether it left a worker Pod: %s",
                attempt.namespace,
                attempt.execution,
                e,
            )
            work.retry_after = work_.LAUNCH_RETRY
            return None

    async def _advance(self, work: work_.Work, hand: records.HandResult) -> None:
        tracked = work.tracked
        attempt = tracked.attempt()
        if attempt.pod_uid is None and not attempt.labels_only and hand.pod_uid:
            # Launched in this step.
            attempt = dataclasses.replace(attempt, pod_uid=hand.pod_uid, terminal=hand.terminal)
        try:
            progress = await attempts.advance(
                runtime=self.runtime,
                store=self.store,
                guard=self.guard,
                attempt=attempt,
                hand=hand,
                cancelled=tracked.cancel or tracked.deleting,
                deadline_seconds=self.archive_deadline_seconds,
                notify=work.notes,
                looked=work.looked,
            )
            if progress.done:
                await self._note_refusals(work, progress)
        except attempts.Interrupted as e:
            self._interrupted(work, e.error)
            return
        except cleanup.Terminating as e:
            if e.overdue:
                self._stopped_early(work, e)
                return
            # Launch removal's own delete, or a user's, still in its grace period: nothing failed.
            logger.debug("A step of %s/%s waits: %s", tracked.namespace, tracked.name, e)
            work.retry_after = work_.TERMINATING_RETRY
            return
        except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable, errors.StaleWrite) as e:
            self._stopped_early(work, e)
            return
        status_.progress(work.patch, work.view, progress)
        status_.synced_again(work.patch, work.view)
        work.waits_for_pod = progress.waits_for_pod
        if progress.retry_after is not None:
            work.retry_after = progress.retry_after
        if progress.done:
            work.settled = True
            work.release = True

    def _stopped_early(self, work: work_.Work, error: Exception) -> None:
        tracked = work.tracked
        self.runtime.metrics.cleanup_failures.labels(error=type(error).__name__).inc()
        if isinstance(error, errors.StoreUnavailable):
            self.runtime.metrics.store_failures.labels(path="cleanup").inc()
        logger.warning(
            "A step of %s/%s stopped early; the next one retries: %s", tracked.namespace, tracked.name, error
        )
        status_.failed(work.patch, work.view, error)
        status_.synced_again(work.patch, work.view)
        if isinstance(error, errors.StaleWrite):
            work.retry_after = work_.CONFLICT_RETRY

    def _interrupted(self, work: work_.Work, error: errors.ApiError | errors.StoreUnavailable) -> None:
        """A step that failed before the attempt's cleanup: no cleanup pass failed, so neither the
        phase nor ``CleanedUp`` changes; ``Synced`` says what failed until a step gets through."""
        tracked = work.tracked
        if isinstance(error, errors.StoreUnavailable):
            self.runtime.metrics.store_failures.labels(path="cleanup").inc()
        logger.warning(
            "A step of %s/%s could not read or record its attempt; the next one retries: %s",
            tracked.namespace,
            tracked.name,
            error,
        )
        status_.set_condition(work.patch, work.view.get("conditions"), status_.not_synced(error))

    async def _note_refusals(self, work: work_.Work, progress: model.Progress) -> None:
        """Count the attempt's refused Pods under their fingerprints (once each: a step that comes
        again counts nothing twice). Raises ``StoreUnavailable``: the step is tried again."""
        tracked = work.tracked
        at = finals.timestamp(finals.now())
        for captured in progress.captures:
            example = records.Example(execution=tracked.name, pod=captured.pod, uid=captured.uid)
            if await self.store.refusals.note(
                slug=tracked.swarm, capture=captured.capture, example=example, at=at
            ):
                failure_class = str(captured.capture.failure_class or records.FailureClass.UNKNOWN)
                self.runtime.metrics.refusals.labels(swarm=tracked.swarm, **{"class": failure_class}).inc()

    # --- writes ---------------------------------------------------------------------------------

    async def _write(self, work: work_.Work) -> Mapping[str, Any] | None:
        """The step's writes to the Execution: its status, its finalizers, its Events."""
        tracked = work.tracked
        if tracked.gone:
            return None
        after: Mapping[str, Any] | None = None
        if work.hold and not work.release:
            after = await self._hold(work)
        if work.patch:
            try:
                after = await self.runtime.cluster.executions.patch_status(
                    namespace=tracked.namespace,
                    name=tracked.name,
                    uid=tracked.uid,
                    status=work.patch,
                )
            except (errors.NotFound, errors.PreconditionFailed):
                work.settled = True  # Gone, or another Execution under the name: not ours to write.
                return None
            except errors.ApiError as e:
                logger.warning("Could not write the status of %s/%s: %s", tracked.namespace, tracked.name, e)
        if work.release:
            after = await self._release(work, after) or after
        await events.post(
            client=self.runtime.cluster.events,
            involved=tracked.reference(),
            notes=work.notes,
            instance=self.instance,
            redactor=self.runtime.redactors.of(namespace=tracked.namespace, slug=tracked.swarm),
        )
        return after

    async def _hold(self, work: work_.Work) -> Mapping[str, Any] | None:
        """The operator's finalizer on the Execution, whose worker outlives this step: deleting it
        then waits for the cleanup. A failed patch is tried by the next step; meanwhile the Pod's
        owner reference and evidence finalizer keep its evidence (see the module docstring)."""
        tracked = work.tracked
        if FINALIZER in tracked.finalizers or tracked.deleting or tracked.gone:
            return None  # A finalizer cannot be added to an Execution being deleted (the API refuses).
        try:
            after = await self.runtime.cluster.executions.patch(
                namespace=tracked.namespace,
                name=tracked.name,
                body={
                    "metadata": {
                        "finalizers": [*tracked.finalizers, FINALIZER],
                        "uid": tracked.uid,
                        "resourceVersion": tracked.resource_version,
                    }
                },
            )
        except errors.ApiError as e:  # A newer version of it (the watch brings it), or an outage.
            logger.info("Could not put the finalizer on %s/%s yet: %s", tracked.namespace, tracked.name, e)
            retry = work_.CONFLICT_RETRY if isinstance(e, errors.PreconditionFailed) else work_.LAUNCH_RETRY
            work.retry_after = retry if work.retry_after is None else min(work.retry_after, retry)
            return None
        metadata = after.get("metadata") or {}
        work.tracked = dataclasses.replace(
            tracked,
            resource_version=str(metadata.get("resourceVersion") or tracked.resource_version),
            finalizers=tuple(metadata.get("finalizers") or (*tracked.finalizers, FINALIZER)),
        )
        return after

    async def _release(self, work: work_.Work, after: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """Remove the operator's finalizer (and an earlier version's): its cleanup is over."""
        tracked = work.tracked
        metadata = (after or {}).get("metadata") or {}
        current = tuple(metadata.get("finalizers") or tracked.finalizers) if after else tracked.finalizers
        ours = {FINALIZER, *self.legacy_finalizers}
        remaining = [f for f in current if f not in ours]
        if len(remaining) == len(current):
            return None
        self.guard.check(before=f"removing the finalizer of {tracked.name}")
        try:
            released = await self.runtime.cluster.executions.patch(
                namespace=tracked.namespace,
                name=tracked.name,
                body={
                    "metadata": {
                        "finalizers": remaining,
                        "uid": tracked.uid,
                        "resourceVersion": str(metadata.get("resourceVersion") or tracked.resource_version),
                    }
                },
            )
        except errors.NotFound:
            return None
        except errors.ApiError as e:  # A newer version of it, or an outage: a later step releases it.
            logger.info("Could not remove the finalizer of %s/%s yet: %s", tracked.namespace, tracked.name, e)
            work.settled = False
            work.retry_after = work_.CONFLICT_RETRY
            return None
        logger.info(
            "Execution %s/%s released: finalizers %s removed.",
            tracked.namespace,
            tracked.name,
            ", ".join(sorted(set(current) - set(remaining))),
        )
        return released


def _unrecorded(status: Mapping[str, Any]) -> bool:
    """Whether the status says the hand result could not be written to Redis yet."""
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Recorded":
            return condition.get("status") == "False"
    return False
