"""What an Execution's status says: its phase and conditions, as pure functions.

The step (:mod:`lifecycle.step`) decides *when* to answer; this module decides *what* the answer
says, so every phase, condition reason and message is built (and unit-tested) in one place. An
:class:`Answer` is written with :func:`apply` onto the step's status patch (one merge patch of
the status subresource); a condition that did not change is not written again, and the other
conditions are kept.

Every answer a user can get is here: the troubleshooting table of docs/operations.md lists the
same reasons.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, MutableMapping
from typing import Any, Final, TypedDict

from agentihooks_swarm import errors, records
from agentihooks_swarm.lifecycle import model
from agentihooks_swarm.lifecycle.model import Phase


class Condition(TypedDict):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


#: The phase in which no launch is pending: the spec or the Swarm must change first.
INVALID: Final = Phase.INVALID
#: The ``status`` field that records which Swarm (uid/generation) a refused Pod was built from.
REJECTED_WITH: Final = "rejectedWith"
#: The annotation that launches an Invalid Execution again; the operator sets it when the Swarm
#: changes, and a user may set it to retry by hand.
RELAUNCH_ANNOTATION: Final = "relaunch.swarm.agentihooks.io/swarm"
#: The annotation on a Swarm whose new value clears its tripped refusal budget.
RESET_BUDGET_ANNOTATION: Final = "swarm.agentihooks.io/reset-refusal-budget"
#: The status fields that say which version of the Execution the last launch acted on: its
#: ``metadata.generation`` and its relaunch annotation's value. A change to either relaunches an
#: Invalid Execution.
OBSERVED_GENERATION: Final = "observedGeneration"
OBSERVED_RELAUNCH: Final = "observedRelaunch"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def condition(*, type_: str, status: bool, reason: str, message: str) -> Condition:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """A phase (None: leave it) and the conditions that explain it, with any extra status fields."""

    phase: Phase | None = None
    conditions: tuple[Condition, ...] = ()
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def set_condition(patch: MutableMapping[str, Any], current: Any, new: Condition) -> None:
    """Set one condition on the status ``patch``, keeping the others; an unchanged one is not written."""
    base = [c for c in (patch.get("conditions", current) or []) if isinstance(c, Mapping)]
    same = next((c for c in base if c.get("type") == new["type"]), None)
    if same is not None and all(same.get(k) == new[k] for k in ("status", "reason", "message")):
        return
    patch["conditions"] = [*(dict(c) for c in base if c.get("type") != new["type"]), dict(new)]


def put(patch: MutableMapping[str, Any], status: Mapping[str, Any], field: str, value: Any) -> None:
    """Write a status field only when it changes: a timer pass over a quiet attempt costs no PATCH."""
    if status.get(field) != value:
        patch[field] = value


def apply(patch: MutableMapping[str, Any], status: Mapping[str, Any], answer: Answer) -> None:
    """Write ``answer`` onto the status patch ``patch``, given the current ``status``."""
    if answer.phase is not None:
        put(patch, status, "phase", answer.phase)
    for field, value in answer.fields.items():
        put(patch, status, field, value)
    for new in answer.conditions:
        set_condition(patch, status.get("conditions"), new)


def invalid_spec(message: str) -> Answer:
    """The Execution's own name or spec cannot be acted on; nothing was created."""
    return Answer(
        phase=INVALID,
        conditions=(condition(type_="Invalid", status=True, reason="InvalidSpec", message=message),),
    )


def rejected(error: errors.SpecRejected, *, swarm_stamp: str) -> Answer:
    """The API server refused an object built from the spec: a permanent answer until a change.

    ``swarm_stamp`` (the Swarm's ``uid/generation``) is kept in the status so that a change to
    the Swarm, and only a change, launches the Execution again.
    """
    what = "the Swarm's worker template" if error.kind == "Pod" else "the Execution's spec"
    return Answer(
        phase=INVALID,
        conditions=(
            condition(
                type_="Invalid",
                status=True,
                reason=f"{error.kind}Rejected",
                message=f"{error}. Fix {what}; the Execution is launched again when its spec "
                "or its Swarm changes.",
            ),
        ),
        fields={REJECTED_WITH: swarm_stamp},
    )


#: The reason of the ``Invalid`` condition of an Execution whose Swarm's worker template names what
#: the cluster's worker policy does not allow (:mod:`lifecycle.worker_policy`).
WORKER_NOT_ALLOWED: Final = "WorkerNotAllowed"


def worker_not_allowed(*, swarm: str, violations: str, swarm_stamp: str) -> Answer:
    """The Swarm's worker template asks for what the worker policy does not allow: no Pod is made.

    Like :func:`rejected`, ``swarm_stamp`` is kept so that a change to the Swarm launches it again.
    """
    message = (
        f"Swarm {swarm}'s worker template asks for what this cluster does not allow workers: "
        f"{violations}. No worker Pod was created. Fix the Swarm (docs/security.md says what a worker "
        "may use; the cluster admin chooses it with AGENTIHOOKS_SWARM_WORKER_*); the Execution is "
        f"launched again when its Swarm changes, or when its annotation {RELAUNCH_ANNOTATION} gets a "
        "new value."
    )
    return Answer(
        phase=INVALID,
        conditions=(condition(type_="Invalid", status=True, reason=WORKER_NOT_ALLOWED, message=message),),
        fields={REJECTED_WITH: swarm_stamp},
    )


def accepted() -> Condition:
    """The Invalid condition once the spec could be acted on (written only over an earlier one)."""
    return condition(type_="Invalid", status=False, reason="Accepted", message="The spec was acted on.")


def name_in_use(*, slug: str, execution: str, owner: records.Owner | None) -> Answer:
    """The execution name's records belong to an earlier Execution: nothing is launched.

    Records are keyed by execution name, and the first capture, final record and retained
    evidence of a name are never replaced; a new Execution under that name could neither keep its
    own evidence nor read its predecessor's as its own. So it waits, visibly, for the name to be
    freed (or for a new name).
    """
    whose = (
        f"Execution uid {owner.uid} in namespace {owner.namespace} (claimed {owner.at})"
        if owner is not None
        else "an earlier Execution (written by an older operator version)"
    )
    message = (
        f"The name {execution} already has records in Redis (swarm {slug}) from {whose}; they are "
        f"kept and this Execution is not launched. Read them with `python -m agentihooks_swarm records "
        f"retained {slug} {execution} --full`. To use the name again, remove them with `python -m "
        f"agentihooks_swarm records forget {slug} {execution} --requested-by YOUR_NAME` (the Event it "
        "leaves names who asked), then set the annotation "
        f"{RELAUNCH_ANNOTATION} on this Execution (any new value); or create it under a new name."
    )
    return Answer(
        phase=INVALID,
        conditions=(condition(type_="Invalid", status=True, reason="NameInUse", message=message),),
    )


def records_forgotten(*, slug: str, execution: str, uid: str) -> Answer:
    """This Execution's records were removed while it could still write them: none is written
    again under its UID (see :class:`errors.Forgotten`), so it is neither launched nor moved on."""
    message = (
        f"The records of {execution} (swarm {slug}) of this Execution (uid {uid}) were removed by "
        "`records forget` or the retention sweep while it could still write them. None of its records "
        "is written again, so it is neither launched nor moved on; its worker Pod, if any, is let go "
        "once it is being deleted. To run it again, create it anew (a new UID) or under a new name."
    )
    return Answer(
        phase=INVALID,
        conditions=(condition(type_="Invalid", status=True, reason="RecordsForgotten", message=message),),
    )


def slug_message(*, slug: str, namespace: str, owner: str) -> str:
    """Why a Swarm named ``slug`` in ``namespace`` cannot use its records: ``owner`` has the slug."""
    return (
        f"The Swarm name {slug} is already used by namespace {owner} in this operator's Redis, where a "
        f"swarm's records, refusals and budget are keyed by its name; nothing of {owner}'s is shown "
        f"here and no worker of Swarm {namespace}/{slug} is launched. Rename this Swarm (and its "
        f"Executions' spec.swarm), or ask the operator's admin to release the name once {owner}'s "
        f"records of it are gone (`python -m agentihooks_swarm records release {slug} --namespace {owner}`)"
    )


def slug_in_use(*, slug: str, namespace: str, owner: str) -> Answer:
    """The Execution's swarm slug belongs to another namespace: nothing is launched."""
    message = slug_message(slug=slug, namespace=namespace, owner=owner) + (
        f"; then set the annotation {RELAUNCH_ANNOTATION} on this Execution (any new value)."
    )
    return Answer(
        phase=INVALID,
        conditions=(condition(type_="Invalid", status=True, reason="SlugInUse", message=message),),
    )


def budget_exceeded(*, swarm: str, state: records.BudgetState) -> Answer:
    """The Swarm's refusal budget holds this Execution back (it is not launched)."""
    return Answer(
        phase=Phase.BLOCKED,
        conditions=(
            condition(
                type_="Launched",
                status=False,
                reason="RefusalBudgetExceeded",
                message=f"Swarm {swarm}'s refusal budget is exceeded: {budget_message(state)}. This "
                "Execution waits and launches once the Swarm's worker template changes, or once its "
                f"annotation {RESET_BUDGET_ANNOTATION} gets a new value.",
            ),
        ),
    )


def budget_message(state: records.BudgetState) -> str:
    """What tripped a budget, in one sentence for a condition or an Event."""
    return (
        f"{state.count} refused worker Pods within {state.window_seconds}s, most with fingerprint "
        f"{state.fingerprint}: {state.text or '(no log line)'}"
    )


#: The reason of the ``Launched`` condition of an Execution held back by its swarm's byte quota.
QUOTA_EXCEEDED: Final = "QuotaExceeded"


def quota_exceeded(*, swarm: str, used: int, bound: int) -> Answer:
    """The swarm's keys take its whole byte quota in Redis: this Execution is not launched."""
    message = (
        f"Swarm {swarm}'s keys take {size(used)} in Redis, at or over its quota of {size(bound)} "
        "(AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES; chart value redis.swarmQuotaBytes). This Execution waits "
        "and launches once the swarm is back under it: remove the records of Executions you no longer "
        f"need (`python -m agentihooks_swarm records forget {swarm} NAME --requested-by YOUR_NAME`), set a "
        "retention "
        "(AGENTIHOOKS_SWARM_RETENTION_SECONDS; redis.retention.seconds), or raise the quota. Workers "
        "already running are captured and cleaned up as always."
    )
    return Answer(
        phase=Phase.BLOCKED,
        conditions=(condition(type_="Launched", status=False, reason=QUOTA_EXCEEDED, message=message),),
    )


def launched_reason(status: Mapping[str, Any], reason: str) -> bool:
    """Whether the status' ``Launched`` condition is False for ``reason`` (held back by it already)."""
    found = status.get("conditions")
    for condition_ in found if isinstance(found, list) else ():
        if isinstance(condition_, Mapping) and condition_.get("type") == "Launched":
            return condition_.get("status") == "False" and condition_.get("reason") == reason
    return False


def size(count: int) -> str:
    """A byte count for people: ``70.2 MiB (73614336 bytes)``."""
    value, unit = float(count), "bytes"
    for larger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({count} bytes)"


def swarm_missing(*, namespace: str, name: str) -> Answer:
    message = f"Swarm {namespace}/{name} does not exist; create it (or fix spec.swarm)"
    return Answer(
        phase=Phase.PENDING,
        conditions=(condition(type_="SwarmFound", status=False, reason="SwarmNotFound", message=message),),
    )


def swarm_invalid(message: str) -> Answer:
    return Answer(
        phase=Phase.PENDING,
        conditions=(condition(type_="SwarmFound", status=False, reason="SwarmInvalid", message=message),),
    )


def pod_name_taken(message: str) -> Answer:
    return Answer(
        phase=Phase.BLOCKED,
        conditions=(condition(type_="Launched", status=False, reason="PodNameTaken", message=message),),
    )


def launch_failed(error: errors.ApiError, *, retry_seconds: float) -> Answer:
    """A launch that failed for a reason that may pass (409, 429, 5xx, timeout, 403): retried."""
    return Answer(
        phase=Phase.PENDING,
        conditions=(
            condition(
                type_="Launched",
                status=False,
                reason="LaunchFailed",
                message=f"{error}; retrying every {retry_seconds:g}s",
            ),
        ),
    )


def handed(hand: records.HandResult, *, detail: str = "", earlier: Any = None) -> Answer:
    """The hand result: ``Running`` when handed, ``Refused`` (with the API server's words) when not.

    ``earlier`` is the current conditions: an Invalid or Launched condition from an earlier,
    failed launch is turned over, so that the status never says both.
    """
    if hand.handed:
        message = f"Worker pod {hand.pod}: grant handed"
    else:
        message = f"Worker pod {hand.pod}: hand refused ({hand.reason}), removed: {str(hand.removed).lower()}"
        if detail:
            message += f"; {detail}"
    conditions = [
        condition(type_="Handed", status=hand.handed, reason=hand.reason or "Handed", message=message)
    ]
    types = {c.get("type") for c in earlier or [] if isinstance(c, Mapping)}
    if "Invalid" in types:
        conditions.append(accepted())
    if "Launched" in types:
        conditions.append(
            condition(type_="Launched", status=True, reason="Launched", message=f"Worker pod {hand.pod}")
        )
    return Answer(
        phase=Phase.RUNNING if hand.handed else Phase.REFUSED,
        conditions=tuple(conditions),
        fields={
            "attempt": hand.generation,
            "pod": hand.pod,
            "hand": {
                "handed": hand.handed,
                "reason": hand.reason,
                "removed": hand.removed,
                "podUid": hand.pod_uid,
                "terminal": hand.terminal,
            },
            REJECTED_WITH: None,
        },
    )


def recorded() -> Condition:
    return condition(type_="Recorded", status=True, reason="Stored", message="Hand result stored in Redis.")


def not_recorded(error: errors.StoreUnavailable) -> Condition:
    return condition(type_="Recorded", status=False, reason="StoreUnavailable", message=str(error))


def cleaning_failed(error: Exception) -> Answer:
    return Answer(
        phase=Phase.CLEANING,
        conditions=(
            condition(type_="CleanedUp", status=False, reason=type(error).__name__, message=str(error)),
        ),
    )


def not_synced(error: Exception) -> Condition:
    """A step stopped before the attempt's cleanup began (its records, its worker Pod or its final
    record could not be read or written): the attempt is where the phase says, and nothing of its
    cleanup failed, so the phase and ``CleanedUp`` stay as they are."""
    return condition(
        type_="Synced",
        status=False,
        reason=type(error).__name__,
        message=f"The last step could not read or record the attempt: {error}; the next step retries.",
    )


def synced_again(patch: MutableMapping[str, Any], status: Mapping[str, Any]) -> None:
    """``Synced`` back to True once a step read and recorded the attempt; written only over an
    earlier ``Synced=False`` (an Execution that never had one gets none)."""
    conditions = patch.get("conditions", status.get("conditions")) or []
    earlier = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Synced"), None)
    if earlier is None or earlier.get("status") == "True":
        return
    set_condition(
        patch,
        status.get("conditions"),
        condition(
            type_="Synced",
            status=True,
            reason="Synced",
            message="The last step read and recorded the attempt.",
        ),
    )


def retained() -> Condition:
    return condition(
        type_="CleanedUp",
        status=True,
        reason="Retained",
        message="Evidence moved to attempt-retained; every pinned object has an outcome.",
    )


def relaunchable(status: Mapping[str, Any]) -> bool:
    """Whether a change to the Execution (its spec, or the nudge after a Swarm change) may launch it.

    Only an Execution that is Invalid and was never handed: a launched attempt is never relaunched.
    """
    return status.get("phase") == INVALID and not status.get("hand")


def observed(*, generation: int | None, relaunch: str | None) -> dict[str, Any]:
    """The status fields that record which version of the Execution a launch acted on."""
    return {OBSERVED_GENERATION: generation, OBSERVED_RELAUNCH: relaunch}


def changed_since_launch(status: Mapping[str, Any], *, generation: int | None, relaunch: str | None) -> bool:
    """Whether the Execution changed (its spec, or its relaunch annotation) since its last launch.

    An Execution from before these fields existed has none: for it, only an annotation counts
    as a change (its generation was never observed).
    """
    if OBSERVED_GENERATION not in status:
        return relaunch is not None and relaunch != status.get(OBSERVED_RELAUNCH)
    return status.get(OBSERVED_GENERATION) != generation or status.get(OBSERVED_RELAUNCH) != relaunch


def stale_rejection(status: Mapping[str, Any], *, swarm_stamp: str) -> bool:
    """Whether a Pod refused for an older Swarm (another uid or generation) is worth another try."""
    stamp = status.get(REJECTED_WITH)
    return relaunchable(status) and isinstance(stamp, str) and stamp != swarm_stamp


def swarm_stamp(swarm: Mapping[str, Any]) -> str:
    """A Swarm object's identity and spec version, ``<uid>/<generation>``."""
    metadata = swarm.get("metadata") or {}
    return f"{metadata.get('uid', '')}/{metadata.get('generation', '')}"


def progress(patch: MutableMapping[str, Any], status: Mapping[str, Any], done: model.Progress) -> None:
    """What one step found of an attempt, as status fields (``finishedAt`` once it is Done); a
    field that did not change is not written again."""
    phase = done.phase
    if phase == Phase.PENDING and status.get("phase") == Phase.RUNNING:
        # The hand said Running; the Pod's own Pending (not yet scheduled) after it would be a
        # step back, and a PATCH per pass, that tells nobody more.
        phase = Phase.RUNNING
    put(patch, status, "phase", phase)
    if done.outcome is not None:
        put(patch, status, "outcome", str(done.outcome))
    put(patch, status, "waitingFor", done.waiting_for or None)
    put(patch, status, "reason", done.reason or None)
    put(patch, status, "failureClass", done.failure_class)
    if done.reason:
        set_condition(
            patch,
            status.get("conditions"),
            condition(
                type_="Started",
                status=False,
                reason=done.reason,
                message=done.message or f"The attempt ended: {done.reason}.",
            ),
        )
    if done.retained is None:
        return
    if not status.get("finishedAt"):
        patch["finishedAt"] = now()
    removed = done.retained.removed
    cleaned = {
        "pods": {r.name: r.outcome for r in removed.pods},
        "services": {r.name: r.outcome for r in removed.services},
        "archived": done.retained.archived,
    }
    put(patch, status, "cleanup", cleaned)
    set_condition(patch, status.get("conditions"), retained())


def failed(patch: MutableMapping[str, Any], status: Mapping[str, Any], error: Exception) -> None:
    """A pass that stopped early: phase Cleaning and why, for ``kubectl get executions``."""
    apply(patch, status, cleaning_failed(error))
