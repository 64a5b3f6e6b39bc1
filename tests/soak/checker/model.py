"""What the checker knows, as plain data: each worker Pod's history as its own watch saw it, the
captures found in Redis, and the findings. Pure functions only; no I/O.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

#: The owner label on every worker Pod: ``agentihooks-swarm-<slug>``.
OWNER_LABEL: Final = "swarm.agentihooks.io/controller-owner"
EXECUTION_LABEL: Final = "swarm.agentihooks.io/execution-id"
#: The attempt a worker Pod is for (``swarm-worker-<execution>-<generation>``).
GENERATION_LABEL: Final = "swarm.agentihooks.io/generation"
OWNER_PREFIX: Final = "agentihooks-swarm-"
#: The finalizer on every worker Pod the operator makes: it holds a deleted Pod (Terminating)
#: until the operator has stored its evidence and removes it. One held at the end is a leak.
EVIDENCE_FINALIZER: Final = "swarm.agentihooks.io/evidence"
#: The planted marker in a worker's log: unique to the Pod (see :mod:`tests.soak.workload`).
MARKER: Final = re.compile(r"soak-marker-([0-9a-f]{16})")

Where = Literal["launch", "journal", "retained"]
Verdict = Literal["violated", "unchecked"]


def refused(status: Mapping[str, Any] | None) -> bool:
    """The spec's definition: the Pod phase is Failed, or an init or main container has
    terminated with a nonzero exit code (a terminated state without one counts as nonzero)."""
    status = status or {}
    if status.get("phase") == "Failed":
        return True
    return any(state.get("exitCode") != 0 for state in _terminated(status))


def ran(status: Mapping[str, Any] | None) -> bool:
    """Whether a container terminated: only then does a capture carry a log, and so a marker."""
    return any(True for _ in _terminated(status or {}))


def _terminated(status: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field_ in ("initContainerStatuses", "containerStatuses"):
        for item in status.get(field_) or []:
            state = ((item or {}).get("state") or {}).get("terminated")
            if isinstance(state, Mapping):
                yield state


@dataclass(frozen=True)
class Loss:
    """A span in which Redis may have dropped writes its primary had acknowledged (same clock as
    the histories): a ``redis-lost-writes`` kill (``began == ended``: the kill), or, while the
    operators run with ``REDIS_MIN_REPLICAS=0``, a ``redis-primary-kill`` from the kill until the
    old primary answers as a replica again (started again, it answers writes as a primary of its
    own, which the promoted replica never receives, until the Sentinels convert it)."""

    kind: str
    began: float
    ended: float


@dataclass
class Probe:
    """What Redis held for a Pod just after the checker saw it deleted."""

    found: bool | None
    """True: a capture with its UID; False: none; None: Redis could not be read."""
    where: str = ""
    detail: str = ""
    at: float | None = None
    """When the read that answered was made (a probe retries while Redis does not answer)."""


@dataclass
class PodHistory:
    """One worker Pod (by UID) as the checker's own watch saw it."""

    uid: str
    name: str
    slug: str
    execution: str
    marker: str | None
    """The marker planted for its name when the checker first saw it (None: none planted)."""
    first_seen: float
    status: dict[str, Any] = field(default_factory=dict)
    """The last status seen (from the DELETED event once it is gone)."""
    attempt: int = 1
    """Its generation label: the Execution's attempt it is the worker of."""
    seen_refused: bool = False
    """A status seen up to its deletion was refused (refusal never goes back)."""
    refused_at: float | None = None
    deleting_at: float | None = None
    """When the checker first saw it being deleted (deletionTimestamp set, or DELETED)."""
    refused_after_delete: bool = False
    """It turned refused only once it was being deleted: its containers were stopped by the
    delete (a kubelet's SIGTERM; kwok's terminate Stage that fires late). The delete made it
    fail, so it was not a refused Pod the operator deleted, and it is not judged as one."""
    deleted: bool = False
    """Its DELETED event was seen: :attr:`status` is its final status."""
    vanished: bool = False
    """It was gone at a relist after a break in the watch: its final status was not seen."""
    probe: Probe | None = None
    controller: str | None = None
    """The UID of the Execution its controller reference names (the first one seen)."""
    finalizers: tuple[str, ...] = ()
    """Its finalizers when last seen."""

    @property
    def held(self) -> bool:
        """Being deleted and still held by the operator's evidence finalizer when last seen."""
        return self.deleting_at is not None and EVIDENCE_FINALIZER in self.finalizers

    @property
    def refused(self) -> bool:
        """Refused before it was deleted: by the last status seen up to its deletion (the event
        that shows ``deletionTimestamp`` carries the status the Pod had when it was deleted)."""
        return self.seen_refused

    @property
    def final_known(self) -> bool:
        """Whether the checker knows how it ended: it saw its deletion, or it still exists."""
        return not self.vanished

    @property
    def gone(self) -> bool:
        return self.deleted or self.vanished

    def observe(self, *, status: Mapping[str, Any] | None, deleting: bool, at: float) -> None:
        already_deleting = self.deleting_at is not None
        self.status = dict(status or {})
        if not refused(self.status):
            pass
        elif not already_deleting and not self.seen_refused:
            self.seen_refused, self.refused_at = True, at
        elif already_deleting and not self.seen_refused:
            self.refused_after_delete = True
        if deleting and self.deleting_at is None:
            self.deleting_at = at


def pod_attempt(pod: Mapping[str, Any]) -> int:
    """The attempt a worker Pod is for (its generation label; 1 when it has none)."""
    value = str(((pod.get("metadata") or {}).get("labels") or {}).get(GENERATION_LABEL) or "1")
    return int(value) if value.isdigit() else 1


def pod_controller(pod: Mapping[str, Any]) -> str | None:
    """The UID of the Execution a Pod's controller reference names (None: no such reference)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") == "Execution":
            return str(ref.get("uid") or "") or None
    return None


def pod_finalizers(pod: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(f) for f in (pod.get("metadata") or {}).get("finalizers") or [])


def pod_identity(pod: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """``(uid, name, slug, execution)`` of a worker Pod, or None for any other Pod."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owner = str(labels.get(OWNER_LABEL) or "")
    if not owner.startswith(OWNER_PREFIX) or not metadata.get("uid"):
        return None
    return (
        str(metadata["uid"]),
        str(metadata.get("name") or ""),
        owner.removeprefix(OWNER_PREFIX),
        str(labels.get(EXECUTION_LABEL) or ""),
    )


@dataclass(frozen=True)
class Capture:
    """One stored capture (or one removed/pinned Pod entry, which may have none)."""

    where: Where
    slug: str
    execution: str
    uid: str
    pod: str
    startup: Mapping[str, Any] | None
    outcome: str | None = None

    def markers(self) -> set[str]:
        return {m for container in self.containers() for m in MARKER.findall(str(container.get("log") or ""))}

    def containers(self) -> list[Mapping[str, Any]]:
        return [c for c in (self.startup or {}).get("containers") or [] if isinstance(c, Mapping)]

    def has_logs(self) -> bool:
        """Some container's log was read (a degraded capture has no ``log`` field at all)."""
        return any("log" in c for c in self.containers())


class RecordError(ValueError):
    """A stored record that does not parse as the spec's shape."""


def captures_from(*, where: Where, slug: str, execution: str, raw: str) -> list[Capture]:
    """The captures (and removed or pinned Pod entries) in one stored record."""
    try:
        document = json.loads(raw)
    except ValueError as e:
        raise RecordError(f"{where} {slug}/{execution}: not JSON: {raw[:200]!r}") from e
    if not isinstance(document, Mapping):
        raise RecordError(f"{where} {slug}/{execution}: not an object")
    capture = functools.partial(Capture, where=where, slug=slug, execution=execution)
    if where == "launch":
        if not isinstance(document.get("uid"), str) or not isinstance(document.get("startup"), Mapping):
            raise RecordError(f"launch {slug}/{execution}: no uid or startup: {raw[:200]!r}")
        return [capture(uid=document["uid"], pod=str(document.get("pod") or ""), startup=document["startup"])]
    entries: list[Mapping[str, Any]] = []
    if where == "journal":
        entries += ((document.get("pinned") or {}).get("pods")) or []
    entries += ((document.get("removed") or {}).get("pods")) or []
    found = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("uid"), str):
            raise RecordError(f"{where} {slug}/{execution}: a pod entry without a uid: {raw[:200]!r}")
        startup = entry.get("startup")
        found.append(
            capture(
                uid=entry["uid"],
                pod=str(entry.get("name") or ""),
                startup=startup if isinstance(startup, Mapping) else None,
                outcome=entry.get("outcome") if isinstance(entry.get("outcome"), str) else None,
            )
        )
    return found


def owner_uid(raw: Any) -> str | None:
    """The Execution UID in a stored owner claim (``execution-owners``: ``{"uid", "namespace",
    "at"}``), or None for no claim; a claim that does not parse is refused."""
    if raw is None:
        return None
    try:
        document = json.loads(str(raw))
    except ValueError as e:
        raise RecordError(f"owner claim: not JSON: {str(raw)[:200]!r}") from e
    if not isinstance(document, Mapping) or not isinstance(document.get("uid"), str):
        raise RecordError(f"owner claim without a uid: {str(raw)[:200]!r}")
    return str(document["uid"])


@dataclass(frozen=True)
class Finding:
    rule: int
    verdict: Verdict
    subject: str
    detail: str

    def line(self) -> str:
        return f"rule {self.rule} {self.verdict}: {self.subject}: {self.detail}"


#: Phases an Execution ends in (the spec's "converged").
CONVERGED: Final = frozenset({"Done", "Invalid", "Blocked"})


@dataclass
class ExecutionHistory:
    """One Execution (by UID: a name used again is another Execution) as the checker saw it."""

    uid: str
    name: str
    phase: str = ""
    launched: bool = False
    """A launch was recorded on it (``status.hand``)."""
    taken_on: bool = False
    """The operator acted on it: it was seen with a status or a finalizer (the soak writes
    neither; an earlier version put one on). An Execution deleted before then may have been
    claimed but not written to by its launch, so a planted Pod of it is not judged."""
    converged_at: float | None = None
    """When it was first seen in a converged phase."""
    deleting_at: float | None = None
    gone_at: float | None = None
    vanished: bool = False
    first_seen: float = 0.0
    done: dict[int, float] = field(default_factory=dict)
    """Attempt (``status.attempt``) -> when it was first seen ``Done`` with that attempt."""

    conditions: str = ""
    """Its status conditions when last seen (``Type=Status/Reason``), for the findings."""

    def observe(self, *, body: Mapping[str, Any], at: float) -> None:
        status = body.get("status") or {}
        self.phase = str(status.get("phase") or "")
        self.conditions = ", ".join(
            f"{c.get('type')}={c.get('status')}/{c.get('reason') or ''}"
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
        )
        self.launched = self.launched or bool(status.get("hand"))
        self.taken_on = self.taken_on or bool(status) or bool((body.get("metadata") or {}).get("finalizers"))
        if self.phase in CONVERGED and self.converged_at is None:
            self.converged_at = at
        if self.phase == "Done":
            attempt = status.get("attempt")
            self.done.setdefault(attempt if isinstance(attempt, int) and attempt > 0 else 1, at)
        if (body.get("metadata") or {}).get("deletionTimestamp") and self.deleting_at is None:
            self.deleting_at = at


@dataclass
class OperatorLife:
    """One run of one operator replica's process, from its start to its end."""

    replica: str
    pid: int
    peak_rss_kib: int = 0
    """The largest VmHWM read from /proc (VmRSS when VmHWM is missing)."""
    samples: int = 0
    exit_code: int | None = None
    killed_by_soak: bool = False
    """Ended by a fault (SIGKILL, rolling restart) or at the end of the run, not by itself."""
    tasks_up: dict[str, float] | None = None
    """``agentihooks_swarm_task_up`` per task at its last scrape (None: /metrics had no such family)."""
    task_restarts: dict[str, float] | None = None
    scrapes: int = 0
    restored: dict[str, float] = field(default_factory=dict)
    """``agentihooks_swarm_evidence_restored_total`` per record kind at its last scrape."""
    restore_skipped: dict[str, float] = field(default_factory=dict)
    """``agentihooks_swarm_evidence_restore_skipped_total`` per reason at its last scrape."""


@dataclass
class Forgotten:
    """A name the workload forgot (``records forget``, as a user runs it) and applied again."""

    slug: str
    name: str
    old_uid: str
    """The Execution whose records were forgotten (deleted and gone before the forget)."""
    forgotten_at: float
    """When the forget said the name was free (same clock as the histories)."""
    before: list[Capture] | None
    """The name's captures read just before the forget (None: Redis could not be read)."""
    read_at: float | None = None
    """When they were read."""
    owner_before: str | None = None
    """The name's owner claim (an Execution UID) read just before the forget."""
    new_uid: str | None = None
    """The Execution applied again under the name (None: it was not created)."""
    applied_at: float | None = None
    in_hold: bool = False
    """Applied again while a redis-lost-writes fault held the replicas' links."""
    refusals: list[str] = field(default_factory=list)
    """What ``records forget`` answered each time it refused (it was run again later)."""


@dataclass(frozen=True)
class Restore:
    """One record an operator said (in its log) it put back after a change of the Redis primary."""

    kind: str
    """``startup``, ``journal`` or ``retained``."""
    slug: str
    execution: str
    at: float
    """Same clock as the histories (from the log line's time)."""
    replica: str
    short: bool = False
    """Written, but fewer replicas than REDIS_MIN_REPLICAS acknowledged it in time."""
