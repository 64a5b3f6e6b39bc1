"""The shape of every JSON document the operator stores in Redis.

One pydantic model per stored shape, so a record is validated when it is written and when it is
read back. Field names are the spec's: ``pod``, ``uid``, ``labels``, ``startup``, ``phase``,
``reason``, ``containers``, ``terminated``, ``log``, ``log_reads``, ``outcome``… Optional fields
that are absent are *left out* of the JSON (a degraded capture has no ``log`` key at all), which
is why every model dumps through :func:`dump`.
"""

from __future__ import annotations

import enum
from typing import Any, Literal, TypeVar

import pydantic

_Model = TypeVar("_Model", bound=pydantic.BaseModel)


class _Record(pydantic.BaseModel):
    # Unknown keys are kept, not dropped: a newer controller's record read by an older one
    # (or a terminated state with fields this code does not know) round-trips unchanged.
    model_config = pydantic.ConfigDict(extra="allow", populate_by_name=True)


def dump(record: pydantic.BaseModel) -> str:
    """Serialize a record as compact JSON, leaving out fields that are ``None``.

    By alias: ``class`` is a Python keyword, so the capture's field is ``failure_class`` in code.
    """
    return record.model_dump_json(exclude_none=True, by_alias=True)


def load(model: type[_Model], raw: str | bytes) -> _Model:
    """Parse and validate a stored record."""
    return model.model_validate_json(raw)


class LogError(_Record):
    """Why a container's log is not in the capture: the last failed read."""

    #: ``refused`` (403 …), ``node_unreachable`` (the API server could not reach the Pod's
    #: kubelet), ``unavailable`` (429, other 5xx, broken connection), ``timeout``, or
    #: ``not_started`` (the kubelet's 400 for a container that never ran: there is no log).
    cause: str
    #: The API server's HTTP status, when it answered.
    status: int | None = None
    #: The failure's text, trimmed.
    message: str | None = None


class ContainerCapture(_Record):
    """One terminated container of a refused Pod."""

    name: str
    #: The container's ``state.terminated`` exactly as the API server reported it (camelCase keys).
    terminated: dict[str, Any]
    #: The last log lines (timestamps on), or absent when the log could not be read.
    log: str | None = None
    #: Present and true when the log was cut to fit the byte limit (the newest lines are kept).
    log_truncated: bool | None = None
    #: Present when there is no ``log``: why (additive; not in the spec's record).
    log_error: LogError | None = None
    #: Present when the first read of a just-terminated container's log was empty: how many
    #: more reads were made (the runtime may write a log's last lines just after it reports the
    #: exit; additive).
    log_rereads: int | None = None


class WaitingContainer(_Record):
    """An init or main container that has not terminated: the evidence when no log exists."""

    name: str
    #: True for an init container; absent for a main container.
    init: bool | None = None
    #: The container's ``state`` exactly as the API server reported it (``waiting`` with reason
    #: and message, or ``running``).
    state: dict[str, Any]
    #: The container's ``lastState`` as reported, when it is not empty.
    last_state: dict[str, Any] | None = None


class EventSource(_Record):
    """Who wrote a core/v1 Event, as it says (``source``: ``kubelet`` and its node)."""

    component: str | None = None
    host: str | None = None


class EventCapture(_Record):
    """One of the Pod's own Events (selected by the Pod's UID).

    Anyone allowed to create Events in the namespace can write one about a Pod, so the writer's
    own words are kept with it (additive): ``source`` (core/v1) and ``reporting_controller``
    and ``reporting_instance`` (both APIs). A kubelet's Event says ``kubelet``; one that says
    something else, or nothing, was written by someone else.
    """

    type: str
    reason: str
    message: str
    count: int
    #: When the Event was first and last seen (RFC 3339), when the API server says.
    first_time: str | None = None
    last_time: str | None = None
    source: EventSource | None = None
    reporting_controller: str | None = None
    reporting_instance: str | None = None


class FailureClass(enum.StrEnum):
    """Why a worker never started, in one word (``capture/failures.py`` decides)."""

    EXIT_CODE = "exit_code"
    SIGNAL = "signal"
    OOM_KILLED = "oom_killed"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    IMAGE_PULL = "image_pull"
    CONFIG_ERROR = "config_error"
    MOUNT = "mount"
    UNSCHEDULABLE = "unschedulable"
    EVICTED = "evicted"
    UNKNOWN = "unknown"


class StartupCapture(_Record):
    """What a refused Pod looked like at startup: phase, reason and its terminated containers.

    ``phase``, ``reason`` and ``containers`` are the spec's record. The other fields are additive
    evidence for the failures a log cannot show; each is left out when there is nothing to keep.
    """

    phase: str
    reason: str
    containers: list[ContainerCapture]
    #: Init and main containers that have not terminated, with their state and lastState.
    waiting: list[WaitingContainer] | None = None
    #: The containers' waiting states when the operator set the startup deadline (the kubelet
    #: that then fails the Pod reports them terminated, ContainerStatusUnknown, without a reason).
    waiting_at_deadline: list[WaitingContainer] | None = None
    #: The Pod's ``status.conditions`` as reported (PodScheduled, Initialized, …).
    conditions: list[dict[str, Any]] | None = None
    #: The Pod's own Events, newest first, at most 20 and 8 KiB in all.
    events: list[EventCapture] | None = None
    #: Why there is no ``events`` field although the capture tried: the failed read.
    events_error: LogError | None = None
    #: The failure class (``class`` in JSON).
    failure_class: FailureClass | None = pydantic.Field(default=None, alias="class")
    #: The same failure in any Pod at any time has the same fingerprint (``capture.fingerprints``):
    #: a short hash of the class, the failing container, its exit code and reason, and its last
    #: log line with what varies masked. Additive.
    fingerprint: str | None = None
    #: That masked line (or the masked reason the Pod waits on), for people, its secrets redacted by
    #: the built-in patterns (``text.py``). Additive.
    fingerprint_text: str | None = None
    #: Present and true when the capture was redacted before it was stored (the setting
    #: ``AGENTIHOOKS_SWARM_STORE_REDACTED``): its logs and messages are not all the worker printed.
    #: Additive; absent, the capture holds the text as printed.
    redacted: bool | None = None


class StartupRecord(_Record):
    """A launch removal's record in ``attempt-startup-diagnostics``, keyed by execution id."""

    pod: str
    uid: str
    labels: dict[str, str]
    startup: StartupCapture


class HandReason(enum.StrEnum):
    """Why a hand was refused. Each one triggers launch removal."""

    PROJECT_UNPERMITTED = "project_unpermitted"
    CONFIG_MAP_EXISTS = "config_map_exists"
    CONFIG_MAP_REFUSED = "config_map_refused"
    CONFIG_MAP_UNAVAILABLE = "config_map_unavailable"
    TERMINAL_REFUSED = "terminal_refused"


class HandResult(_Record):
    """The result of handing a worker Pod its grant, in ``attempt-hands`` and the Execution status."""

    generation: int
    handed: bool
    reason: HandReason | None = None
    #: Only for a refused hand: whether launch removal deleted the Pod.
    removed: bool | None = None
    pod: str
    #: Beyond the spec's fields: the worker Pod's UID, so the attempt knows its own Pod even when
    #: an orphaning delete of the Execution stripped the Pod's owner reference.
    pod_uid: str | None = pydantic.Field(
        default=None,
        serialization_alias="podUid",
        validation_alias=pydantic.AliasChoices("podUid", "pod_uid"),
    )
    #: Beyond the spec's fields: whether the launch made (or may have made) the worker's terminal
    #: Service, its Swarm's template having a terminal port. False lets final cleanup skip listing
    #: the attempt's Services; None (a version before it) lists them.
    terminal: bool | None = None


class FinalState(enum.StrEnum):
    """How an attempt ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REFUSED = "refused"


class FinalRecord(_Record):
    """An attempt's final record in ``attempt-finals``: written once, never changed."""

    execution: str
    generation: int
    state: FinalState
    #: The transcript offset the worker had reached when the attempt ended (0 if it never reported).
    transcript_end: int = 0
    #: Where the outcome is recorded: ``attempt-outcomes`` keyed by execution id.
    outcome: str
    #: When the attempt was found final (RFC 3339, UTC); the archive deadline counts from here.
    at: str | None = None
    #: Why a Pod that never became refused ended the attempt (``Unschedulable``); additive.
    reason: str | None = None
    #: That Pod's evidence (phase, conditions, events, class) — its Pod is deleted without a
    #: capture, as the spec says for a Pod that is not refused.
    evidence: StartupCapture | None = None


class Heartbeat(_Record):
    """A worker's report in ``attempt-heartbeats``: how far its transcript is archived."""

    execution: str
    generation: int
    #: Bytes (or entries) of transcript written so far.
    transcript: int = 0
    #: Bytes (or entries) of transcript safely archived so far.
    archived: int = 0
    at: str


class Outcome(_Record):
    """A worker's reported outcome in ``attempt-outcomes``."""

    execution: str
    generation: int
    success: bool
    summary: str = ""
    at: str


RemovalOutcome = Literal["deleted", "absent", "absent_after_send", "replaced", "unselected"]


class PinnedObject(_Record):
    """A Pod or Service pinned by final cleanup, in ``cleanup-journal``."""

    name: str
    uid: str
    #: Set once the delete was sent (recorded *before* sending), so a restart can tell
    #: ``absent`` from ``absent_after_send``.
    sent: bool | None = None
    startup: StartupCapture | None = None
    log_reads: int | None = None
    #: When the first failed log read of this Pod happened (RFC 3339; additive). A failure that
    #: may pass (the node or the API server did not answer) counts in ``log_reads`` only once
    #: enough time has passed since then (see ``cleanup.COUNTED_AFTER``).
    log_read_failed_at: str | None = None
    #: The last failed read's cause and message, while the Pod waits for its capture (additive).
    log_read_error: LogError | None = None


class RemovedObject(_Record):
    """One pinned object once cleanup is done with it."""

    name: str
    uid: str
    outcome: RemovalOutcome
    startup: StartupCapture | None = None
    log_reads: int | None = None


class Objects(_Record):
    pods: list[PinnedObject] = pydantic.Field(default_factory=list)
    services: list[PinnedObject] = pydantic.Field(default_factory=list)


class RemovedObjects(_Record):
    pods: list[RemovedObject] = pydantic.Field(default_factory=list)
    services: list[RemovedObject] = pydantic.Field(default_factory=list)


class Journal(_Record):
    """Final cleanup in progress, in ``cleanup-journal`` keyed by execution id."""

    #: Counts the entry's writes (additive; first, so the store's scripts find it without parsing
    #: the whole entry). Every save names the version it read and fails when another write came
    #: between (compare-and-set): a stale writer can never put back what a later one changed.
    #: None in an entry written before versions existed (read as 0).
    version: int | None = None
    execution: str
    generation: int
    pinned: Objects
    removed: RemovedObjects = pydantic.Field(default_factory=RemovedObjects)


class Retained(_Record):
    """Final cleanup's evidence, in ``attempt-retained`` keyed by execution id."""

    execution: str
    final: FinalRecord
    #: The archive watermark when cleanup finished.
    watermark: int
    #: False when cleanup went ahead at the archive deadline without the transcript archived.
    archived: bool
    removed: RemovedObjects


class Owner(_Record):
    """Which Execution (by UID) an execution name's records belong to, in ``execution-owners``.

    Additive. Claimed once, before the first worker Pod of that Execution is created: a new
    Execution under a used name finds another UID here and is never launched (phase ``Invalid``,
    reason ``NameInUse``), so it can neither take the old records as its own nor leave a Pod
    whose evidence has nowhere to go.
    """

    uid: str
    namespace: str
    #: When the name was claimed (RFC 3339, UTC).
    at: str


class Example(_Record):
    """One refused Pod of a fingerprint (the first seen)."""

    execution: str
    pod: str
    uid: str


class FingerprintSummary(_Record):
    """One fingerprint of a swarm's refusals, in ``refusal-fingerprints`` keyed by fingerprint."""

    fingerprint: str
    text: str
    #: The failure class (``class`` in JSON).
    failure_class: FailureClass | None = pydantic.Field(default=None, alias="class")
    count: int
    #: RFC 3339, UTC.
    first_seen: str
    last_seen: str
    example: Example


class BudgetState(_Record):
    """A swarm's tripped refusal budget, in ``refusal-budget`` (field ``state``)."""

    fingerprint: str
    text: str
    count: int
    window_seconds: int
    #: When it tripped (RFC 3339, UTC).
    at: str
    #: The Swarm's worker template (its digest) and its reset annotation when it tripped: a change
    #: of either clears it.
    template: str
    reset: str
