"""What must hold before an Execution's worker is launched: the launch's gates, in their order.

:meth:`step.Lifecycle.step` asks here before it creates a worker Pod, and launches only with what
:meth:`Gates.clear` lets through. Each gate that is closed says why in the step's :class:`work.Work`
(the status' answer, an Event, when to come again) and the launch stops there:

* :meth:`Gates.recorded`: a hand recorded in Redis whose status was never written is gone on
  from, never launched beside;
* the spec (``InvalidSpec``): one the table found invalid is answered as it is; a valid one is
  read at the launch (the table keeps none) and parsed;
* the Swarm, read and parsed (``SwarmNotFound``, ``SwarmInvalid``), and its worker template within
  the cluster admin's worker policy (``WorkerNotAllowed``);
* the swarm's slug is this namespace's (``SlugInUse``), before anything of the slug's is shown:
  before its refusal budget is read, before its byte quota's answer, else with the name's claim
  in one round trip;
* its refusal budget and its byte quota (``Blocked``);
* its name's records claimed (``NameInUse``);
* the swarm's worker credential, made before the worker that mounts it.

The order is the cheapest and least binding first: nothing is written to the Execution or Redis
before the spec and the Swarm are known to be launchable.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from agentihooks_swarm import errors, records, resources
from agentihooks_swarm.lifecycle import (
    attempts,
    budget,
    cleanup,
    finals,
    model,
    quota as quota_,
    status as status_,
    watched,
    work as work_,
    worker_policy,
)
from agentihooks_swarm.storage import operations

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cleared:
    """What the gates let through to the launch."""

    execution: resources.ExecutionSpec
    #: The Swarm as its worker is built (the worker policy's ServiceAccount where it names none).
    swarm: resources.SwarmSpec
    #: The Swarm's ``uid/generation``, kept in a refused launch's status.
    stamp: str
    #: The Secret of the swarm's worker credential its Pod mounts (None: none).
    credential: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gates:
    """The launch's gates, on the step's collaborators (:class:`step.Lifecycle`'s own)."""

    runtime: model.Runtime
    store: operations.AsyncStore
    guard: model.Guard
    #: The swarms' byte quota: at it, a swarm's new Executions wait (None: no quota).
    quota: quota_.Quota | None = None
    #: The swarms' worker Redis credentials, made before a launch (None: workers get none).
    credentials: model.Credentials | None = None
    #: The Swarms as watched (None: every launch reads its Swarm from the API server).
    swarms: watched.SwarmWatch | None = None

    async def clear(self, work: work_.Work) -> Cleared | None:
        """Every gate after :meth:`recorded`, in order: what the launch needs, or None when one is
        closed (the status says why, or the step is tried again)."""
        tracked = work.tracked
        execution = await self._execution(work)
        if execution is None:
            return None
        found = await self._swarm(work)
        if found is None:
            return None
        parsed, stamp, raw = found
        swarm = self._allowed(work, swarm=parsed, stamp=stamp)
        if swarm is None:
            return None
        # A budget reads the slug's own records, so the slug is known to be this namespace's
        # first; otherwise the name's claim checks it in the same round trip.
        slug_checked = swarm.refusal_budget is not None
        if slug_checked and not await self._slug_ours(work):
            return None
        if swarm.refusal_budget is not None and await self._held_back(work, swarm=swarm, raw=raw):
            return None
        if self.quota is not None and await self._at_quota(work, quota=self.quota, slug_checked=slug_checked):
            return None
        self.guard.check(before=f"launching {tracked.name}")
        if not await self._claim(work, slug_checked=slug_checked):
            return None
        made, credential = await self._credential(work, raw=raw)
        if not made:
            return None
        return Cleared(execution=execution, swarm=swarm, stamp=stamp, credential=credential)

    async def recorded(self, work: work_.Work) -> tuple[bool, records.HandResult | None]:
        """Whether Redis could say, and the hand of a launch whose status was never written (the
        patch failed after the step launched, and maybe finished, the attempt): the step goes on
        from the hand recorded in Redis, and never launches a second worker beside the first
        one's records."""
        tracked = work.tracked
        try:
            hand = await self.store.recorded_hand(slug=tracked.swarm, execution=tracked.name, uid=tracked.uid)
        except errors.StoreUnavailable as e:  # Unknown whether it launched: not before Redis says.
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = work_.RECORD_RETRY
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

    async def _execution(self, work: work_.Work) -> resources.ExecutionSpec | None:
        """The Execution's spec, parsed; None when it cannot launch (``Invalid``, ``InvalidSpec``:
        settled until it changes) or cannot be read now. A spec the table already found invalid
        (:attr:`model.Tracked.spec_error`) is answered without reading the Execution again."""
        tracked = work.tracked
        error = tracked.spec_error
        if error is None:
            spec = await self._spec(work)
            if spec is None:
                return None
            try:
                return resources.parse_execution(name=tracked.name, spec=spec)
            except errors.InvalidResource as e:
                error = str(e)
        work.answer(status_.invalid_spec(error), **work.observed())
        work.notes.warning(reason="InvalidSpec", message=error)
        work.settled = True
        return None

    async def _spec(self, work: work_.Work) -> Mapping[str, Any] | None:
        """The Execution's spec at its launch: the one the watch brought, when the table kept it
        (:attr:`model.Tracked.spec`), else read. None when it cannot be read now, or it is gone or
        another Execution has its name (the watch brings that)."""
        tracked = work.tracked
        self.runtime.metrics.launch_reads.labels(
            object="execution", source="live" if tracked.spec is None else "watch"
        ).inc()
        if tracked.spec is not None:
            return tracked.spec
        try:
            found = await self.runtime.cluster.executions.read(namespace=tracked.namespace, name=tracked.name)
        except errors.ApiError as e:
            work.answer(status_.launch_failed(e, retry_seconds=work_.LAUNCH_RETRY))
            work.retry_after = work_.LAUNCH_RETRY
            return None
        if found is None or (found.get("metadata") or {}).get("uid") != tracked.uid:
            work.retry_after = work_.CONFLICT_RETRY
            return None
        spec = found.get("spec")
        return spec if isinstance(spec, Mapping) else {}

    async def _swarm(self, work: work_.Work) -> tuple[resources.SwarmSpec, str, dict[str, Any]] | None:
        """The Execution's Swarm, parsed, its stamp and the object itself; None when there is none
        to launch with."""
        tracked = work.tracked
        found = self.swarms.swarm(namespace=tracked.namespace, name=tracked.swarm) if self.swarms else None
        self.runtime.metrics.launch_reads.labels(
            object="swarm", source="live" if found is None else "watch"
        ).inc()
        try:
            if found is None:
                found = await self.runtime.cluster.swarms.read(
                    namespace=tracked.namespace, name=tracked.swarm
                )
        except errors.ApiError as e:
            logger.warning("Could not read Swarm %s/%s, retrying: %s", tracked.namespace, tracked.swarm, e)
            work.retry_after = work_.LAUNCH_RETRY
            return None
        if found is None:
            work.answer(status_.swarm_missing(namespace=tracked.namespace, name=tracked.swarm))
            work.retry_after = work_.SWARM_MISSING_RETRY
            return None
        try:
            swarm = resources.parse_swarm(name=tracked.swarm, spec=found.get("spec"))
        except errors.InvalidResource as e:
            work.answer(status_.swarm_invalid(f"{e}; fix the Swarm"))
            work.retry_after = work_.SWARM_INVALID_RETRY
            return None
        self.runtime.redactors.learn(
            namespace=tracked.namespace, slug=tracked.swarm, patterns=swarm.redaction.patterns
        )
        return swarm, status_.swarm_stamp(found), found

    def _allowed(
        self, work: work_.Work, *, swarm: resources.SwarmSpec, stamp: str
    ) -> resources.SwarmSpec | None:
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

    async def _slug_ours(self, work: work_.Work) -> bool:
        """Whether the swarm's slug is this namespace's (claimed now if nobody's): a swarm's records,
        refusals and budget belong to one namespace, so a Swarm of the same name elsewhere is told
        so before anything of the other namespace's is read for it."""
        tracked = work.tracked
        try:
            owner = await self.store.slugs.claim(slug=tracked.swarm, namespace=tracked.namespace)
        except errors.StoreUnavailable as e:
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = work_.RECORD_RETRY
            return False
        if owner == tracked.namespace:
            return True
        self._slug_in_use(work, owner=owner)
        return False

    def _slug_in_use(self, work: work_.Work, *, owner: str) -> None:
        tracked = work.tracked
        answer = status_.slug_in_use(slug=tracked.swarm, namespace=tracked.namespace, owner=owner)
        work.answer(answer, **work.observed())
        work.notes.warning(reason="SlugInUse", message=answer.conditions[0]["message"])
        work.settled = True

    async def _held_back(self, work: work_.Work, *, swarm: resources.SwarmSpec, raw: dict[str, Any]) -> bool:
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

    async def _at_quota(self, work: work_.Work, *, quota: quota_.Quota, slug_checked: bool) -> bool:
        """Whether the swarm's byte quota holds this Execution back (the status says so). The answer
        shows the swarm's bytes, so only to the namespace that owns its name: another one is told
        ``SlugInUse`` instead."""
        tracked = work.tracked
        reached = await quota.at_bound(slug=tracked.swarm)
        if reached is None:
            return False
        if not slug_checked and not await self._slug_ours(work):
            return True
        answer = quota.hold(slug=tracked.swarm, reached=reached, status=work.view, notes=work.notes)
        work.answer(answer, **work.observed())
        return True

    async def _claim(self, work: work_.Work, *, slug_checked: bool) -> bool:
        """Claim the execution name's records for this Execution; False when it may not launch.
        ``slug_checked``: the slug is known to be this namespace's; else it is claimed with the
        name, and another namespace's answers ``SlugInUse`` as :meth:`_slug_ours` does.

        Records without an owner are an older version's, unless this Execution owns a worker Pod
        of the attempt: then its launch made them and a Redis failover dropped the claim it made
        first. It claims them and goes on (adopting its Pod); ``NameInUse`` would settle it with
        its worker left running for good."""
        tracked = work.tracked
        claim = records.Owner(uid=tracked.uid, namespace=tracked.namespace, at=finals.timestamp(finals.now()))
        try:
            if slug_checked:
                owner = await self.store.claim(slug=tracked.swarm, execution=tracked.name, owner=claim)
            else:
                claimed = await self.store.claim_in_slug(
                    slug=tracked.swarm, namespace=tracked.namespace, execution=tracked.name, owner=claim
                )
                if isinstance(claimed, operations.OtherNamespace):
                    self._slug_in_use(work, owner=claimed.namespace)
                    return False
                owner = claimed
            if owner is None:
                launched = await self._owns_worker(work)
                if launched is None:
                    return False
                if launched:
                    owner = await self.store.claim(
                        slug=tracked.swarm, execution=tracked.name, owner=claim, launched=True
                    )
        except errors.StoreUnavailable as e:
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = work_.RECORD_RETRY
            return False
        if owner is not None and owner.uid == tracked.uid:
            return True
        answer = status_.name_in_use(slug=tracked.swarm, execution=tracked.name, owner=owner)
        work.answer(answer, **work.observed())
        work.notes.warning(reason="NameInUse", message=answer.conditions[0]["message"])
        work.settled = True
        return False

    async def _owns_worker(self, work: work_.Work) -> bool | None:
        """Whether this Execution owns a worker Pod of its attempt (by UID: no older version's
        Execution can). None: the API server could not say; the step is tried again."""
        attempt = work.tracked.attempt()
        if attempt.labels_only:  # Known by its labels alone: no UID proves the Pod is its own.
            return False
        try:
            return bool(await cleanup.owned_pods(runtime=self.runtime, attempt=attempt))
        except errors.ApiError as e:
            work.answer(status_.launch_failed(e, retry_seconds=work_.LAUNCH_RETRY))
            work.retry_after = work_.LAUNCH_RETRY
            return None

    async def _credential(self, work: work_.Work, *, raw: Mapping[str, Any]) -> tuple[bool, str | None]:
        """The swarm's worker credential before its worker exists: whether the launch goes on, and
        the Secret its Pod mounts. A refused one is the Swarm's to tell (the worker launches
        without); one that cannot be made now (API server or Redis away) waits for the next step."""
        if self.credentials is None:
            return True, None
        try:
            return True, await self.credentials.ensure(swarm=raw)
        except (errors.ApiUnavailable, errors.ApiTimeout) as e:
            work.answer(status_.launch_failed(e, retry_seconds=work_.LAUNCH_RETRY))
            work.retry_after = work_.LAUNCH_RETRY
        except errors.StoreUnavailable as e:
            status_.set_condition(work.patch, work.view.get("conditions"), status_.not_recorded(e))
            work.retry_after = work_.RECORD_RETRY
        return False, None
