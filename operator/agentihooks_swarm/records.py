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
    model_config = pydantic.ConfigDict(extra="allow")


def dump(record: pydantic.BaseModel) -> str:
    """Serialize a record as compact JSON, leaving out fields that are ``None``."""
    return record.model_dump_json(exclude_none=True)


def load(model: type[_Model], raw: str | bytes) -> _Model:
    """Parse and validate a stored record."""
    return model.model_validate_json(raw)


class ContainerCapture(_Record):
    """One terminated container of a refused Pod."""

    name: str
    #: The container's ``state.terminated`` exactly as the API server reported it (camelCase keys).
    terminated: dict[str, Any]
    #: The last log lines (timestamps on), or absent when the log could not be read.
    log: str | None = None
    #: Present and true when the log was cut to fit the byte limit (the newest lines are kept).
    log_truncated: bool | None = None


class StartupCapture(_Record):
    """What a refused Pod looked like at startup: phase, reason and its terminated containers."""

    phase: str
    reason: str
    containers: list[ContainerCapture]


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
