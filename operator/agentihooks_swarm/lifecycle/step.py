"""One step of one Execution's lifecycle: the only code that launches or advances an attempt.

Every trigger — a new Execution, a change of its spec or relaunch annotation, its deletion, the
periodic resync, a restart — ends in :meth:`Lifecycle.step`, called by the reconciler's workers,
which never run two steps of one Execution at once (:mod:`controller.workqueue`). A step reads what it needs
(the records in one round trip, the worker Pod), acts, and then writes the Execution once: one
status patch that only applies to the Execution it read (its UID), the operator's finalizer, and
its Events. So there is one path for the status and one for the Events, whatever the trigger.

What a step does, by the Execution's state:

* not launched: read and parse the spec (the table keeps none), read the Swarm, hold it back while
  its Swarm's refusal budget is exceeded or its swarm is at its byte quota (``Blocked``), put the
  operator's finalizer on the Execution (so deleting it waits for cleanup), claim its name's
  records (:meth:`storage.operations.AsyncStore.claim`: a name another Execution used is refused,
  ``NameInUse``), create or adopt the worker Pod, hand it its grant (launch removal on a refused
  hand), record the hand;
* launched: :func:`attempts.advance` (final record, outcome, archive, final cleanup);
* being deleted: the same, cancelled; once cleanup is done (or there was never a worker), the
  finalizer goes and the Execution with it.

Expected failures (the API server, Redis, a cleanup pass that must wait) become the status' answer
and a later step; ``NotLeader`` ends the step without a write; anything else propagates to the
reconciler, which logs and counts it and tries again later.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Final

from agentihooks_swarm import errors, records, resources
from agentihooks_swarm.kubernetes.labels import FINALIZER
from agentihooks_swarm.lifecycle import (
    attempts,
    budget,
    cleanup,
    events,
    finals,
    launch,
    model,
    quota as quota_,
    status as status_,
    worker_policy,
)
from agentihooks_swarm.lifecycle.model import Phase
from agentihooks_swarm.storage import keys, operations

logger = logging.getLogger(__name__)

#: Seconds before a launch that failed for a reason that may pass is tried again.
LAUNCH_RETRY: Final = 10.0
#: Seconds before the hand result is written again after Redis failed.
RECORD_RETRY: Final = 15.0
#: Seconds before a missing or invalid Swarm, or a foreign Pod under the worker's name, is looked
#: at again (a change to the Execution itself wakes it at once).
SWARM_MISSING_RETRY: Final = 30.0
SWARM_INVALID_RETRY: Final = 60.0
FOREIGN_POD_RETRY: Final = 60.0
#: Seconds before a write that lost a race with a newer version of the Execution is tried again.
CONFLICT_RETRY: Final = 1.0
#: Seconds between looks at a pinned object that someone else is deleting, within its grace period.
TERMINATING_RETRY: Final = 2.0


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


@dataclasses.dataclass(kw_only=True)
class _Work:
    """One step's state: what it learnt and what it will write."""

    tracked: model.Tracked
    patch: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: events.Collected = dataclasses.field(default_factory=events.Collected)
    retry_after: float | None = None
    release: bool = False
    settled: bool = False
    waits_for_pod: bool = False

    @property
    def view(self) -> dict[str, Any]:
        """The status as it will be once the patch is written."""
        return {**self.tracked.status, **self.patch}

    def answer(self, answer: status_.Answer, **fields: Any) -> None:
        status_.apply(self.patch, self.view, answer)
        for name, value in fields.items():
            status_.put(self.patch, self.view, name, value)

    def observed(self) -> dict[str, Any]:
        return status_.observed(generation=self.tracked.spec_generation, relaunch=self.tracked.relaunch)


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

    async def step(self, tracked: model.Tracked) -> Step:
        """Move one Execution as far as it can go now; see the module docstring."""
        work = _Work(tracked=tracked)
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

    async def _act(self, work: _Work) -> None:
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

    async def _launch(self, work: _Work) -> records.HandResult | None:
        """Launch the Execution's attempt; its hand result, or None when it was not launched (the
        status says why)."""
        tracked = work.tracked
        known, recorded = await self._recorded(work)
        if not known or recorded is not None:
            return recorded
        spec = await self._spec(work)
        if spec is None:
            return None
        try:
            execution = resources.parse_execution(name=tracked.name, spec=spec)
        except errors.InvalidResource as e:
            work.answer(status_.invalid_spec(str(e)), **work.observed())
            work.notes.warning(reason="InvalidSpec", message=str(e))
            work.settled = True
            return None
        found = await self._swarm(work)
        if found is None:
            return None
        parsed, stamp, raw = found
        swarm = self._allowed(work, swarm=parsed, stamp=stamp)
        if swarm is None:
            return None
        if not await self._slug_ours(work):
            return None
        if swarm.refusal_budget is not None and await self._held_back(work, swarm=swarm, raw=raw):
            return None
        if self.quota is not None:
            held = await self.quota.holds_back(slug=tracked.swarm, status=work.view, notes=work.notes)
            if held is not None:
                work.answer(held, **work.observed())
                return None
        self.guard.check(before=f"launching {tracked.name}")
        if not await self._hold(work) or not await self._claim(work):
            return None
        made, credential = await self._credential(work, raw=raw)
        if not made:
            return None
        return await self._hand(work, execution=execution, swarm=swarm, stamp=stamp, credential=credential)

    async def _recorded(self, work: _Work) -> tuple[bool, records.HandResult | None]:
        """Whether Redis could say, and the hand of a launch whose status was never written (the
        patch failed after the step launched, and maybe finished, the attempt): the step goes on
        from the hand recorded in Redis, and never launches a second worker beside the first
        one's records."""
        tracked = work.tracked
        try:
            hand = await self.store.recorded_hand(slug=tracked.swarm, execution=tracked.name, uid=tracked.uid)
        except errors.StoreUnavailable as e:  # Unknown whether it launched: not before Redis says.
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = RECORD_RETRY
            return False, None
        if hand is None or hand.generation != tracked.attempt_number:
            return True, None
        logger.info(
            "Execution %s/%s was launched before its status said so: going on from its recorded hand.",
            tracked.namespace,
            tracked.name,
        )
        work.answer(status_.handed(hand, earlier=work.view.get("conditions")), **work.observed())
        if hand.handed:
            work.patch["waitingFor"] = attempts.WORKER_RUNNING
        status_.set_condition(work.patch, work.view.get("conditions"), status_.recorded())
        return True, hand

    async def _spec(self, work: _Work) -> Mapping[str, Any] | None:
        """The Execution's spec, read at its launch: the table keeps none (a task may be 1 MB, and
        thousands may wait). None when it cannot be read now, or it is gone or another Execution
        has its name (the watch brings that)."""
        tracked = work.tracked
        try:
            found = await self.runtime.cluster.executions.read(namespace=tracked.namespace, name=tracked.name)
        except errors.ApiError as e:
            work.answer(status_.launch_failed(e, retry_seconds=LAUNCH_RETRY))
            work.retry_after = LAUNCH_RETRY
            return None
        if found is None or (found.get("metadata") or {}).get("uid") != tracked.uid:
            work.retry_after = CONFLICT_RETRY
            return None
        spec = found.get("spec")
        return spec if isinstance(spec, Mapping) else {}

    async def _swarm(self, work: _Work) -> tuple[resources.SwarmSpec, str, dict[str, Any]] | None:
        """The Execution's Swarm, parsed, its stamp and the object itself; None when there is none
        to launch with."""
        tracked = work.tracked
        try:
            found = await self.runtime.cluster.swarms.read(namespace=tracked.namespace, name=tracked.swarm)
        except errors.ApiError as e:
            logger.warning("Could not read Swarm %s/%s, retrying: %s", tracked.namespace, tracked.swarm, e)
            work.retry_after = LAUNCH_RETRY
            return None
        if found is None:
            work.answer(status_.swarm_missing(namespace=tracked.namespace, name=tracked.swarm))
            work.retry_after = SWARM_MISSING_RETRY
            return None
        try:
            swarm = resources.parse_swarm(name=tracked.swarm, spec=found.get("spec"))
        except errors.InvalidResource as e:
            work.answer(status_.swarm_invalid(f"{e}; fix the Swarm"))
            work.retry_after = SWARM_INVALID_RETRY
            return None
        return swarm, status_.swarm_stamp(found), found

    def _allowed(self, work: _Work, *, swarm: resources.SwarmSpec, stamp: str) -> resources.SwarmSpec | None:
        """The Swarm as its worker is built (the policy's ServiceAccount where the template names
        none); None when the template asks for what the worker policy does not allow: the
        Execution is Invalid (``WorkerNotAllowed``), with a Warning Event, and no Pod is made."""
        policy = self.runtime.worker_policy
        violations = worker_policy.check(swarm.worker, policy=policy)
        if not violations:
            return worker_policy.launchable(swarm, policy=policy)
        answer = status_.worker_not_allowed(
            swarm=work.tracked.swarm, violations=worker_policy.describe(violations), swarm_stamp=stamp
        )
        work.answer(answer, **work.observed())
        work.notes.warning(reason=status_.WORKER_NOT_ALLOWED, message=answer.conditions[0]["message"])
        work.settled = True
        return None

    async def _slug_ours(self, work: _Work) -> bool:
        """Whether the swarm's slug is this namespace's (claimed now if nobody's): a swarm's records,
        refusals and budget belong to one namespace, so a Swarm of the same name elsewhere is told
        so before anything of the other namespace's is read for it."""
        tracked = work.tracked
        try:
            owner = await self.store.slugs.claim(slug=tracked.swarm, namespace=tracked.namespace)
        except errors.StoreUnavailable as e:
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = RECORD_RETRY
            return False
        if owner == tracked.namespace:
            return True
        answer = status_.slug_in_use(slug=tracked.swarm, namespace=tracked.namespace, owner=owner)
        work.answer(answer, **work.observed())
        work.notes.warning(reason="SlugInUse", message=answer.conditions[0]["message"])
        work.settled = True
        return False

    async def _held_back(self, work: _Work, *, swarm: resources.SwarmSpec, raw: dict[str, Any]) -> bool:
        """Whether the Swarm's refusal budget holds this Execution back (the status says so)."""
        limits = swarm.refusal_budget
        assert limits is not None
        tracked = work.tracked
        try:
            verdict, state = await budget.verdict(
                store=self.store, slug=tracked.swarm, budget=limits, swarm=raw
            )
        except errors.StoreUnavailable as e:  # The budget cannot be read: launching is the default.
            logger.warning("Could not read the refusal budget of swarm %s; launching: %s", tracked.swarm, e)
            return False
        if verdict != "tripped" or state is None:
            return False
        work.answer(status_.budget_exceeded(swarm=tracked.swarm, state=state), **work.observed())
        return True

    async def _hold(self, work: _Work) -> bool:
        """The operator's finalizer on the Execution before its worker exists, so that deleting
        it waits for cleanup. False when it could not be added now (the step is tried again)."""
        tracked = work.tracked
        if FINALIZER in tracked.finalizers:
            return True
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
        except errors.PreconditionFailed:  # A newer version of it exists: the watch brings it.
            work.retry_after = CONFLICT_RETRY
            return False
        except errors.ApiError as e:
            work.answer(status_.launch_failed(e, retry_seconds=LAUNCH_RETRY))
            work.retry_after = LAUNCH_RETRY
            return False
        metadata = after.get("metadata") or {}
        work.tracked = dataclasses.replace(
            tracked,
            resource_version=str(metadata.get("resourceVersion") or tracked.resource_version),
            finalizers=tuple(metadata.get("finalizers") or (*tracked.finalizers, FINALIZER)),
        )
        return True

    async def _claim(self, work: _Work) -> bool:
        """Claim the execution name's records for this Execution; False when it may not launch."""
        tracked = work.tracked
        try:
            owner = await self.store.claim(
                slug=tracked.swarm,
                execution=tracked.name,
                owner=records.Owner(
                    uid=tracked.uid, namespace=tracked.namespace, at=finals.timestamp(finals.now())
                ),
            )
        except errors.StoreUnavailable as e:
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = RECORD_RETRY
            return False
        if owner is not None and owner.uid == tracked.uid:
            return True
        answer = status_.name_in_use(slug=tracked.swarm, execution=tracked.name, owner=owner)
        work.answer(answer, **work.observed())
        work.notes.warning(reason="NameInUse", message=answer.conditions[0]["message"])
        work.settled = True
        return False

    async def _credential(self, work: _Work, *, raw: Mapping[str, Any]) -> tuple[bool, str | None]:
        """The swarm's worker credential before its worker exists: whether the launch goes on, and
        the Secret its Pod mounts. A refused one is the Swarm's to tell (the worker launches
        without); one that cannot be made now (API server or Redis away) waits for the next step."""
        if self.credentials is None:
            return True, None
        try:
            return True, await self.credentials.ensure(swarm=raw)
        except (errors.ApiUnavailable, errors.ApiTimeout) as e:
            work.answer(status_.launch_failed(e, retry_seconds=LAUNCH_RETRY))
            work.retry_after = LAUNCH_RETRY
        except errors.StoreUnavailable as e:
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = RECORD_RETRY
        return False, None

    async def _hand(
        self,
        work: _Work,
        *,
        execution: resources.ExecutionSpec,
        swarm: resources.SwarmSpec,
        stamp: str,
        credential: str | None = None,
    ) -> records.HandResult | None:
        tracked = work.tracked
        try:
            launched = await launch.launch(
                runtime=self.runtime,
                attempt=tracked.attempt(),
                swarm=swarm,
                execution=execution,
                notify=work.notes,
                guard=self.guard,
                credential=credential,
            )
        except errors.SpecRejected as e:
            answer = status_.rejected(e, swarm_stamp=stamp)
            work.answer(answer, **work.observed())
            work.notes.warning(reason=answer.conditions[0]["reason"], message=str(e))
            work.settled = True
            return None
        except launch.ForeignPod as e:
            work.answer(status_.pod_name_taken(f"{e}; remove that pod to let this execution launch"))
            work.retry_after = FOREIGN_POD_RETRY
            return None
        except errors.ApiError as e:
            work.answer(status_.launch_failed(e, retry_seconds=LAUNCH_RETRY))
            work.retry_after = LAUNCH_RETRY
            return None
        hand = launched.hand
        earlier = work.view.get("conditions")
        work.answer(status_.handed(hand, detail=launched.detail, earlier=earlier), **work.observed())
        if hand.handed:  # What the steps report until the worker ends: written once, here.
            work.patch["waitingFor"] = attempts.WORKER_RUNNING
        # The attempt goes on only from a hand held in Redis: if this step's status write fails
        # too, the next step finds the hand there (:meth:`_recorded`) instead of launching again.
        return hand if await self._record_hand(work, hand) else None

    async def _record_hand(self, work: _Work, hand: records.HandResult) -> bool:
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
            work.retry_after = RECORD_RETRY
            return False
        status_.set_condition(work.patch, work.view.get("conditions"), status_.recorded())
        return True

    # --- after the launch -----------------------------------------------------------------------

    async def _unlaunched(self, work: _Work) -> records.HandResult | None:
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
            work.retry_after = RECORD_RETRY
            return None
        if owner is None or owner.uid != tracked.uid:
            work.release = work.settled = True
            return None
        return records.HandResult(
            generation=tracked.attempt_number, handed=True, pod=tracked.attempt().pod_name
        )

    async def _advance(self, work: _Work, hand: records.HandResult) -> None:
        tracked = work.tracked
        try:
            progress = await attempts.advance(
                runtime=self.runtime,
                store=self.store,
                guard=self.guard,
                attempt=tracked.attempt(),
                hand=hand,
                cancelled=tracked.cancel or tracked.deleting,
                deadline_seconds=self.archive_deadline_seconds,
                notify=work.notes,
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
            work.retry_after = TERMINATING_RETRY
            return
        except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable, errors.StaleWrite) as e:
            self._stopped_early(work, e)
            return
        status_.progress(work.patch, work.view, progress)
        status_.synced_again(work.patch, work.view)
        work.waits_for_pod = progress.waits_for_pod
        if progress.done:
            work.settled = True
            work.release = True

    def _stopped_early(self, work: _Work, error: Exception) -> None:
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
            work.retry_after = CONFLICT_RETRY

    def _interrupted(self, work: _Work, error: errors.ApiError | errors.StoreUnavailable) -> None:
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

    async def _note_refusals(self, work: _Work, progress: model.Progress) -> None:
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

    async def _write(self, work: _Work) -> Mapping[str, Any] | None:
        """The step's writes to the Execution: its status, its finalizers, its Events."""
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
        )
        return after

    async def _release(self, work: _Work, after: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
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
            work.retry_after = CONFLICT_RETRY
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
