"""One step of one Execution's lifecycle: the only code that launches or advances an attempt.

Every trigger — a new Execution, a change of its spec or relaunch annotation, its deletion, the
periodic resync, a restart — ends in :meth:`Lifecycle.step`, called by the reconciler's workers,
which never run two steps of one Execution at once (:mod:`controller.workqueue`). A step reads what it needs
(the records in one round trip, the worker Pod), acts, and then writes the Execution once: one
status patch that only applies to the Execution it read (its UID), then its Events. So there is one
path for the status and one for the Events, whatever the trigger.

What a step does, by the Execution's state:

* not launched: pass the launch's gates (:mod:`.gates`: read and parse the spec, read the Swarm,
  hold it back while its Swarm's refusal budget is exceeded or its swarm is at its byte quota
  (``Blocked``), claim its name's records (:meth:`storage.operations.AsyncStore.claim`: a name
  another Execution used is refused, ``NameInUse``)), then create or adopt the worker Pod, hand it
  its grant (launch removal on a refused hand), record the hand;
* launched: :func:`attempts.advance` (final record, outcome, archive, final cleanup);
* being deleted, or gone while tracked: the same, cancelled.

The Execution carries no finalizer of the operator's: what a delete must not lose is the worker
Pod's evidence, and the Pod keeps that itself. Its Execution owns it and its evidence finalizer
holds it, so whoever deletes the Execution, the garbage collector's delete of the Pod leaves it
terminating, readable, until a step (from the table's memory of the Execution) or the orphan pass
(:mod:`controller.orphans`, after a restart) has captured it; as the Job controller keeps its
Pods with a finalizer on each Pod, not on the Job. So a deleted Execution goes at once, and an
attempt costs no finalizer round trips. Executions an earlier version launched still carry its
finalizer (``labels.FINALIZER``) or kopf's: the step that finds their cleanup done removes it.

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
    #: kopf's finalizer, which an earlier version put on Executions: released with ``labels.FINALIZER``.
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
        except errors.Forgotten as e:
            await self._forgotten(work, e)
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
                life=tracked.uid,
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
            recorded = (
                await self.store.recorded_hand(slug=tracked.swarm, execution=tracked.name, uid=tracked.uid)
                if owner is not None and owner.uid == tracked.uid
                else None
            )
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
        if recorded is not None and recorded.generation == tracked.attempt_number:
            # Its launch recorded the hand (the status write was lost, or the Execution is known
            # again only by its Pod): the Pod's UID there finds it even after an orphaning delete
            # stripped its owner reference.
            return recorded
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

    async def _forgotten(self, work: work_.Work, error: errors.Forgotten) -> None:
        """The user forgot this life's records (``records forget``) while a step of it was in
        flight, most often after deleting its Execution: nothing more of it is written (each write
        for a life refuses once it is forgotten). Its worker Pod, once being deleted, is let go:
        its evidence is what the user chose to forget. One not being deleted stays (a worker of an
        Execution still there, forgotten with ``--force``, whose status then says so: phase
        ``Invalid``, reason ``RecordsForgotten``); deleting the Execution lets it go."""
        tracked = work.tracked
        self.runtime.metrics.cleanup_failures.labels(error=type(error).__name__).inc()
        logger.warning(
            "The records of %s/%s were forgotten while a step of it was in flight; nothing more of "
            "it is recorded, and its worker Pod is let go once it is being deleted: %s",
            tracked.namespace,
            tracked.name,
            error,
        )
        work.settled = True
        if not tracked.gone:
            answer = status_.records_forgotten(slug=tracked.swarm, execution=tracked.name, uid=tracked.uid)
            work.answer(answer, **work.observed())
        attempt = tracked.attempt()
        pods = self.runtime.cluster.pods
        try:
            found = await pods.read(namespace=attempt.namespace, name=attempt.pod_name)
            metadata = (found or {}).get("metadata") or {}
            if found is not None and metadata.get("deletionTimestamp") and attempt.owns(found):
                self.guard.check(before=f"letting go of the worker Pod of forgotten {tracked.name}")
                uid = str(metadata.get("uid"))
                await pods.release(namespace=attempt.namespace, name=attempt.pod_name, uid=uid, found=found)
        except errors.ApiError as e:
            work.settled = False
            work.retry_after = work_.CONFLICT_RETRY
            logger.warning(
                "Could not let go of the worker Pod of %s/%s: %s", tracked.namespace, tracked.name, e
            )

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
        """The step's writes to the Execution: its status, an earlier version's finalizer, its Events."""
        tracked = work.tracked
        if tracked.gone:
            return None
        after: Mapping[str, Any] | None = None
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

    async def _release(self, work: work_.Work, after: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """Remove the finalizer an earlier version put on the Execution: its cleanup is over."""
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
