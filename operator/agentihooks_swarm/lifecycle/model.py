"""The shared types of the lifecycle's steps: what an attempt is, what a step found, who may act.

The bottom floor of the step modules (``launch``, ``cleanup``, ``attempts``, ``lifecycle``): each of
them imports these types from here and none imports another step module for a type, so the
modules that do the work form a line, not a cycle.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, Protocol

from agentihooks_swarm import errors, metrics as metrics_, records, text
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import clients, event_index, labels, owners
from agentihooks_swarm.lifecycle import watched, worker_policy as worker_policy_


class Phase(enum.StrEnum):
    """An Execution's ``status.phase``, as ``kubectl get executions`` shows it."""

    #: Waiting to launch (its Swarm is missing, or a launch failed and is retried), or its worker
    #: Pod is not running yet.
    PENDING = "Pending"
    RUNNING = "Running"
    #: The hand was refused; final cleanup follows.
    REFUSED = "Refused"
    #: Final; cleanup waits for the transcript archive.
    ARCHIVING = "Archiving"
    #: A cleanup pass stopped early; the next one retries.
    CLEANING = "Cleaning"
    #: Cleanup finished: the evidence is in ``attempt-retained``. Nothing more happens.
    DONE = "Done"
    #: The spec cannot be acted on until it (or its Swarm) changes.
    INVALID = "Invalid"
    #: Something outside the Execution stands in its way (a foreign Pod has its worker's name).
    BLOCKED = "Blocked"

    @classmethod
    def of_pod(cls, pod_phase: object) -> Phase:
        """An attempt's phase while its worker Pod lives: the Pod's own, as far as it is ours."""
        return cls.RUNNING if pod_phase in ("Running", "Unknown") else cls.PENDING


#: The phases after which an Execution needs no step (unless it is being deleted or changed).
SETTLED = frozenset({Phase.DONE, Phase.INVALID})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Attempt:
    """One attempt of one Execution: the labels and names of its objects follow from these."""

    namespace: str
    slug: str
    execution: str
    generation: int
    #: The Execution's UID: its worker Pod's controller reference names it (:mod:`kubernetes.owners`).
    owner_uid: str
    #: The worker Pod's UID as the launch recorded it (``status.hand.podUid``), once known.
    pod_uid: str | None = None
    #: Launched by a version that put no controller reference on its Pods (its hand has no
    #: ``podUid``): its Pods are known by their labels alone, as that version knew them.
    labels_only: bool = False
    #: Whether the launch made (or may have made) a terminal Service (``status.hand.terminal``);
    #: None when not recorded.
    terminal: bool | None = None

    def owns(self, obj: Mapping[str, Any] | None) -> bool:
        """Whether ``obj`` is this attempt's own object: the attempt's labels, and owned by its
        Execution (or the recorded Pod). A look-alike with the right name and labels is not."""
        metadata = (obj or {}).get("metadata") or {}
        if not labels.matches(metadata.get("labels"), self.labels):
            return False
        return self.labels_only or owners.owned(obj, execution_uid=self.owner_uid, pod_uid=self.pod_uid)

    @property
    def labels(self) -> dict[str, str]:
        return labels.attempt(slug=self.slug, execution=self.execution, generation=self.generation)

    @property
    def pod_name(self) -> str:
        return labels.worker_pod_name(execution=self.execution, generation=self.generation)


class Recorder(Protocol):
    async def record_startup(
        self, *, slug: str, execution: str, record: records.StartupRecord, life: str
    ) -> records.StartupRecord: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runtime:
    """The collaborators of the launch and cleanup paths."""

    #: The Kubernetes clients (Pods, their ConfigMaps and Services, Swarms, Executions, Events).
    cluster: clients.Clients
    #: Where launch captures go. None means refused Pods are kept (the spec's "no recorder").
    recorder: Recorder | None
    metrics: metrics_.Metrics
    #: A worker's startup deadline when its Swarm's template sets none
    #: (``AGENTIHOOKS_SWARM_STARTUP_DEADLINE_SECONDS``).
    startup_deadline_seconds: int = 600
    #: The startup capture. The operator always wires :func:`diagnostics.startup`; there is no
    #: setting or variable for it. Only ``tests/bench`` assembles a runtime with another one, to
    #: measure the capture's cost against a baseline that captures nothing.
    startup: diagnostics.Capture = diagnostics.startup
    #: The operator's index of the Pods' Events; without it, or while it is out of sync, a
    #: capture lists the Pod's Events itself.
    events: event_index.EventIndex | None = None
    #: What a Swarm may put in its workers (``AGENTIHOOKS_SWARM_WORKER_*``); the default is the
    #: settings' defaults, the safe ones.
    worker_policy: worker_policy_.WorkerPolicy = dataclasses.field(
        default_factory=worker_policy_.WorkerPolicy
    )
    #: What the Events of each Swarm's Executions are redacted with (``text.py``).
    redactors: text.Redactors = dataclasses.field(default_factory=text.Redactors)
    #: What a capture is redacted with before it is stored (``AGENTIHOOKS_SWARM_STORE_REDACTED``;
    #: None: stored as printed). ``startup`` is wrapped with it too; this covers the evidence of a
    #: worker never scheduled, which is no startup capture.
    store_redactor: text.Redactor | None = None
    #: The operator's watch of its worker Pods, for the reads a stale view cannot harm
    #: (:mod:`.watched`); None: every such read goes to the API server.
    workers: watched.WorkerWatch | None = None

    @property
    def reader(self) -> diagnostics.Reader:
        """What a capture reads a Pod's logs and Events from."""
        if self.events is None:
            return self.cluster.pods
        return event_index.IndexedReader(client=self.cluster.pods, index=self.events)


class Credentials(Protocol):
    """A swarm's worker Redis credential, made before its workers launch
    (:class:`agentihooks_swarm.swarm.credentials.WorkerCredentials`)."""

    async def ensure(self, *, swarm: Mapping[str, Any]) -> str | None:
        """The Secret the worker Pods of ``swarm`` (the Swarm object) mount; None: none."""
        ...


class Guard(Protocol):
    """Checked before each write and delete: raises :class:`errors.NotLeader` when this replica
    may not act."""

    def check(self, *, before: str) -> None: ...


class Unguarded:
    """A guard for a single replica (tests, tools): always leads."""

    def check(self, *, before: str) -> None:
        return None


NotLeader = errors.NotLeader


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    """How far a step moved an attempt, for its Execution's status."""

    phase: Phase
    outcome: str | None = None
    waiting_for: str = ""
    retained: records.Retained | None = None
    #: Why the attempt is ending or ended the way it does (``StartupDeadlineExceeded``,
    #: ``Unschedulable``), with a sentence for the Execution's status.
    reason: str = ""
    message: str = ""
    #: The failure class of the attempt's captured Pod (or of its final record's evidence).
    failure_class: str | None = None
    #: Once Done: every refused Pod of the attempt with its capture (launch record and retained).
    captures: tuple[Captured, ...] = ()
    #: The worker has started and runs: only a change of its Pod (or an outcome it writes to Redis)
    #: moves the attempt on, so the step may wait for the Pod watch instead of the next resync.
    waits_for_pod: bool = False
    #: The next step is wanted in this many seconds, not at the next resync (None: no hurry).
    retry_after: float | None = None

    @property
    def done(self) -> bool:
        return self.retained is not None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Captured:
    """One refused Pod's stored capture."""

    pod: str
    uid: str
    capture: records.StartupCapture


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tracked:
    """One Execution as a step needs it, and nothing else of its body (the table holds thousands)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    #: ``metadata.generation``: bumped by the API server on every change of the spec.
    spec_generation: int | None
    swarm: str
    cancel: bool
    #: It has a ``deletionTimestamp``: its attempt is cancelled, and it goes once cleanup is done.
    deleting: bool
    #: It was deleted (the watch said so) while its attempt was in flight: its cleanup still runs,
    #: from this last view of it, and nothing is written to it any more.
    gone: bool = False
    finalizers: tuple[str, ...] = ()
    #: The relaunch annotation's value, if any.
    relaunch: str | None = None
    #: The status' own fields (not kopf's bookkeeping of an earlier version).
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: The spec as the watch brought it (at ``spec_generation``), kept only until the launch and
    #: only while small (:data:`controller.executions.SPEC_KEPT`): the launch is the one step that
    #: needs it, a task may be 1 MB, and thousands may wait. None: the launch reads it. A spec one
    #: event old launches as one read a moment before a change would: the change's own event moves
    #: ``spec_generation`` on, and the status says which generation was launched. One deleted a
    #: moment before launches as it would right after a live read: its Pod's owner is gone, the
    #: garbage collector deletes the Pod, and its evidence finalizer holds it for the orphan pass.
    spec: Mapping[str, Any] | None = None
    #: Why the spec the watch brought cannot launch (:func:`resources.parse_execution`'s message;
    #: None: it parses, or it was launched): kept instead of the spec, so that the step answers an
    #: invalid one without reading the Execution again.
    spec_error: str | None = None

    @property
    def attempt_number(self) -> int:
        value = self.status.get("attempt")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    def attempt(self) -> Attempt:
        stored = self.status.get("hand")
        hand = stored if isinstance(stored, Mapping) and self.status.get("pod") else None
        pod_uid = hand.get("podUid") if hand is not None else None
        terminal = hand.get("terminal") if hand is not None else None
        return Attempt(
            namespace=self.namespace,
            slug=self.swarm,
            execution=self.name,
            generation=self.attempt_number,
            owner_uid=self.uid,
            pod_uid=pod_uid if isinstance(pod_uid, str) and pod_uid else None,
            labels_only=hand is not None and not pod_uid,
            terminal=terminal if isinstance(terminal, bool) else None,
        )

    def hand(self) -> records.HandResult | None:
        """The hand result of its launch, from the status; None before the launch finished."""
        stored = self.status.get("hand")
        if not isinstance(stored, Mapping) or not self.status.get("pod"):
            return None
        reason = stored.get("reason")
        known = {str(r) for r in records.HandReason}
        return records.HandResult(
            generation=self.attempt_number,
            handed=bool(stored.get("handed")),
            reason=records.HandReason(reason) if isinstance(reason, str) and reason in known else None,
            removed=stored.get("removed") if isinstance(stored.get("removed"), bool) else None,
            pod=str(self.status["pod"]),
            pod_uid=stored.get("podUid") if isinstance(stored.get("podUid"), str) else None,
            terminal=stored.get("terminal") if isinstance(stored.get("terminal"), bool) else None,
        )

    def reference(self) -> dict[str, Any]:
        """An object reference (for its Events)."""
        return {
            "apiVersion": "swarm.agentihooks.io/v1alpha1",
            "kind": "Execution",
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }
