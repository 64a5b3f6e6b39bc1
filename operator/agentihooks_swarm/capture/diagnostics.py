"""What counts as refused, and the startup capture of a refused Pod.

:func:`startup` is the one entry point both deletion paths use: launch removal and final
cleanup. It takes a Pod as the API server sent it (a plain dict) and never trusts its shape:
missing or odd status fields make a smaller capture, never an exception.

Next to the spec's fields (phase, reason, terminated containers and their logs) a capture keeps,
when present, the evidence of failures that leave no log: the containers that have not
terminated (``waiting``), the Pod's ``conditions``, its own ``events`` and the failure ``class``.
The Events read never fails a capture: a refused or failed read leaves no ``events`` field (and
says why in ``events_error``), so it never keeps a Pod that the spec would delete.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol

import pydantic

from agentihooks_swarm import errors, records
from agentihooks_swarm.capture import causes, failures, fingerprints
from agentihooks_swarm.kubernetes import labels, logs

#: The Pod's Events kept in a capture: the newest 20, at most 8 KiB of JSON in all.
EVENTS_MAX: Final = 20
EVENTS_MAX_BYTES: Final = 8 * 1024
#: The longest Event message kept (the API server's own Events are shorter).
EVENT_MESSAGE_MAX: Final = 1024
#: The longest of an Event's other words kept: ``type``, ``reason``, the writer's names and the
#: times. Kubernetes names are at most 253 characters; a core/v1 Event's words have no bound at
#: all, and one written to be large must not crowd the others out of ``EVENTS_MAX_BYTES``.
EVENT_FIELD_MAX: Final = 253
#: The waiting states noted on a Pod when its startup deadline is set (an annotation).
WAITING_NOTE_MAX_BYTES: Final = 4 * 1024
#: A container runtime may report a container's exit a moment before its log relay has written
#: the last lines (containerd's CRI copies output through a pipe to the log file). An empty log of
#: a container that terminated within ``LOG_SETTLE_WINDOW`` seconds is read again after each of
#: these pauses, until it is not empty.
LOG_REREAD_PAUSES: Final = (0.5, 1.5)
LOG_SETTLE_WINDOW: Final = 30.0


class LogReader(Protocol):
    async def pod_logs(self, *, namespace: str, name: str, container: str) -> logs.LogRead: ...


class Reader(LogReader, Protocol):
    async def pod_events(self, *, namespace: str, uid: str) -> list[dict[str, Any]]: ...


class Capture(Protocol):
    """The shape of :func:`startup`, the capture both deletion paths call (a collaborator of
    ``launch.Runtime``; the operator always wires :func:`startup` itself)."""

    async def __call__(
        self,
        pod: dict[str, Any],
        client: Reader,
        *,
        read_logs: bool = True,
        failed_read: BaseException | None = None,
    ) -> records.StartupCapture | None: ...


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _statuses(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    status = _mapping(pod.get("status"))
    for field in ("initContainerStatuses", "containerStatuses"):
        items = status.get(field)
        if isinstance(items, list):
            yield from (item for item in items if isinstance(item, dict))


def terminated(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every terminated init and main container: ``(name, state.terminated)``, init containers first."""
    found = []
    for item in _statuses(pod):
        state = _mapping(_mapping(item.get("state")).get("terminated"))
        if state:
            found.append((str(item.get("name", "")), state))
    return found


def is_refused(pod: dict[str, Any]) -> bool:
    """Refused: the Pod phase is Failed, or any container terminated with a nonzero exit code.

    A terminated state without an exit code (a signal, a malformed status) is not "exited 0", so
    it counts as refused: capturing too much is cheap, deleting evidence is not.
    """
    if _mapping(pod.get("status")).get("phase") == "Failed":
        return True
    return any(state.get("exitCode") != 0 for _, state in terminated(pod))


def waiting(pod: dict[str, Any]) -> list[records.WaitingContainer]:
    """Every init and main container that has not terminated, with its state and lastState."""
    status = _mapping(pod.get("status"))
    found = []
    for field, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        items = status.get(field)
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            state = _mapping(item.get("state"))
            if state.get("terminated"):
                continue
            last = _mapping(item.get("lastState"))
            found.append(
                records.WaitingContainer(
                    name=str(item.get("name", "")),
                    init=True if init else None,
                    state=state,
                    last_state=last or None,
                )
            )
    return found


def conditions(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The Pod's conditions as reported."""
    items = _mapping(pod.get("status")).get("conditions")
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def _when(mapping: dict[str, Any], *fields: str) -> str:
    """The first of ``fields`` that holds a time (a non-empty string)."""
    for field in fields:
        value = mapping.get(field)
        if isinstance(value, str) and value:
            return value
    return ""


_NEVER: Final = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _moment(value: str) -> datetime.datetime:
    """An RFC 3339 time (seconds, micro- or nanoseconds), or the earliest time if it is none."""
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return _NEVER
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def fit_events(raw: Sequence[dict[str, Any]]) -> list[records.EventCapture]:
    """The newest Events first, at most ``EVENTS_MAX`` and ``EVENTS_MAX_BYTES`` of JSON in all.

    Both Event APIs' time fields are read: ``lastTimestamp``/``firstTimestamp`` (core/v1, what a
    kubelet writes), ``series.lastObservedTime`` and ``eventTime`` (events.k8s.io, the
    scheduler's), then ``metadata.creationTimestamp``. Times are compared as times (the two APIs
    write different precisions, which do not sort as strings); equal times go by
    ``resourceVersion``, which grows with every write.
    """
    shaped: list[tuple[tuple[datetime.datetime, int], records.EventCapture]] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        event: dict[str, Any] = item
        series = _mapping(event.get("series"))
        last = (
            _when(series, "lastObservedTime")
            or _when(event, "lastTimestamp", "eventTime")
            or _when(_mapping(event.get("metadata")), "creationTimestamp")
        )
        first = _when(event, "firstTimestamp", "eventTime") or last
        count = series.get("count") or event.get("count") or 1
        message = str(event.get("message") or "")
        version = str(_mapping(event.get("metadata")).get("resourceVersion") or "")
        order = (_moment(last), int(version) if version.isdigit() else 0)
        source = _mapping(event.get("source"))
        shaped.append(
            (
                order,
                records.EventCapture(
                    type=_word(event.get("type")) or "",
                    reason=_word(event.get("reason")) or "",
                    message=message[:EVENT_MESSAGE_MAX],
                    count=count if isinstance(count, int) else 1,
                    first_time=_word(first),
                    last_time=_word(last),
                    source=(
                        records.EventSource(
                            component=_word(source.get("component")), host=_word(source.get("host"))
                        )
                        if _word(source.get("component")) or _word(source.get("host"))
                        else None
                    ),
                    # core/v1 spells it reportingComponent, events.k8s.io reportingController.
                    reporting_controller=_word(
                        event.get("reportingController") or event.get("reportingComponent")
                    ),
                    reporting_instance=_word(event.get("reportingInstance")),
                ),
            )
        )
    shaped.sort(key=lambda pair: pair[0], reverse=True)
    kept: list[records.EventCapture] = []
    size = 2  # The list's brackets.
    for _, shape in shaped:
        if len(kept) == EVENTS_MAX:
            break
        cost = len(records.dump(shape).encode("utf-8")) + 1
        if size + cost > EVENTS_MAX_BYTES:
            # Skipped, not the end: one large Event (bounded above, but a message of multi-byte
            # characters is still large) must not drop the smaller ones after it.
            continue
        kept.append(shape)
        size += cost
    return kept


def _word(value: Any) -> str | None:
    """A string field of an Event cut to ``EVENT_FIELD_MAX`` characters, or None if empty."""
    if not isinstance(value, str) or not value:
        return None
    return value[:EVENT_FIELD_MAX]


def log_error(error: BaseException, *, state: dict[str, Any] | None = None) -> records.LogError:
    """The ``log_error`` of a failed read: its cause (as the metrics name it) and status.
    ``state``: the container's terminated state, when the read was for a terminated container."""
    status = error.status if isinstance(error, errors.ApiError) else None
    if isinstance(error, errors.ApiError) and _not_started(error, state=state):
        cause = "not_started"
    else:
        cause = causes.of(error).name
    return records.LogError(cause=cause, status=status, message=errors.trim(str(error)) or None)


def _not_started(error: errors.ApiError, *, state: dict[str, Any] | None = None) -> bool:
    """The kubelet's answer for a container that never ran, which has no log to lose.

    A 400 saying the container "is waiting to start" or, once the kubelet failed the Pod
    (DeadlineExceeded), "is terminated", counts only for a container whose terminated state has
    no ``startedAt`` (ContainerStatusUnknown: it never ran): the same text about a container that
    did run is a failed read like any other, and is counted.
    """
    if error.status != 400 or state is None or state.get("startedAt"):
        return False
    text = str(error)
    return "waiting to start" in text or "is terminated" in text


def waiting_at_deadline(pod: dict[str, Any]) -> list[records.WaitingContainer]:
    """The waiting states the operator noted on the Pod when it set the startup deadline."""
    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    raw = annotations.get(labels.WAITING_AT_DEADLINE)
    try:
        items = json.loads(raw) if isinstance(raw, str) else []
        return [records.WaitingContainer.model_validate(item) for item in items if isinstance(item, dict)]
    except (ValueError, pydantic.ValidationError):
        return []  # a note someone else edited is no evidence; the live status still is


def note_waiting(pod: dict[str, Any]) -> str:
    """The ``WAITING_AT_DEADLINE`` annotation's value for ``pod`` now (JSON, at most 4 KiB)."""
    noted = [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in waiting(pod)]
    text = json.dumps(noted, separators=(",", ":"))
    while len(text.encode()) > WAITING_NOTE_MAX_BYTES and noted:
        noted.pop()
        text = json.dumps(noted, separators=(",", ":"))
    return text


async def startup(
    pod: dict[str, Any],
    client: Reader,
    *,
    read_logs: bool = True,
    failed_read: BaseException | None = None,
) -> records.StartupCapture | None:
    """Capture a refused Pod's phase, reason, terminated containers and their logs; None if not refused.

    The log read's errors (``ApiRefused``, ``ConnectionError``, ``TimeoutError``) propagate: the
    caller decides whether to keep the Pod or count the failure. The one exception is the
    kubelet's 400 "container … is waiting to start": that container has no log to lose, so its
    entry gets a ``log_error`` (``not_started``) and the capture goes on. An empty log of a container
    that has just terminated is read again (``LOG_REREAD_PAUSES``; ``log_rereads`` says so). With
    ``read_logs=False`` the capture keeps each container's exit state and has no ``log`` field
    (final cleanup after ``LOG_READS`` failed reads); ``failed_read`` is the last failure, kept as
    each container's ``log_error``.
    """
    if not is_refused(pod):
        return None
    return await _capture(pod, client, read_logs=read_logs, failed_read=failed_read)


async def evidence(pod: dict[str, Any], client: Reader) -> records.StartupCapture:
    """The same capture for a Pod that is not refused (one that was never scheduled): no logs."""
    return await _capture(pod, client, read_logs=False, failed_read=None)


async def _capture(
    pod: dict[str, Any], client: Reader, *, read_logs: bool, failed_read: BaseException | None
) -> records.StartupCapture:
    metadata = _mapping(pod.get("metadata"))
    status = _mapping(pod.get("status"))
    namespace = str(metadata.get("namespace", ""))
    containers = []
    for name, state in terminated(pod):
        entry = records.ContainerCapture(name=name, terminated=state)
        if read_logs and name:
            try:
                read, rereads = await _read_log(
                    client,
                    namespace=namespace,
                    pod=str(metadata.get("name", "")),
                    container=name,
                    state=state,
                )
            except errors.ApiRefused as e:
                if not _not_started(e, state=state):
                    raise
                entry.log_error = log_error(e, state=state)
            else:
                entry.log = read.text
                entry.log_truncated = True if read.truncated else None
                entry.log_rereads = rereads or None
        elif failed_read is not None:
            entry.log_error = log_error(failed_read)
        containers.append(entry)
    capture = records.StartupCapture(
        phase=str(status.get("phase") or ""),
        reason=str(status.get("reason") or ""),
        containers=containers,
        waiting=waiting(pod) or None,
        waiting_at_deadline=waiting_at_deadline(pod) or None,
        conditions=conditions(pod) or None,
    )
    uid = str(metadata.get("uid") or "")
    if uid:
        try:
            capture.events = fit_events(await client.pod_events(namespace=namespace, uid=uid)) or None
        except (errors.ApiError, ConnectionError, TimeoutError) as e:
            capture.events_error = log_error(e)
    capture.failure_class = failures.classify(capture)
    names = (
        str(metadata.get("name") or ""),
        str(_mapping(metadata.get("labels")).get(labels.EXECUTION) or ""),
    )
    waited = capture.model_copy(update={"waiting": capture.waiting or capture.waiting_at_deadline})
    capture.fingerprint, capture.fingerprint_text = fingerprints.describe(
        capture, names=names, summary=summary(waited)
    )
    return capture


def just_terminated(state: dict[str, Any], *, now: datetime.datetime | None = None) -> bool:
    """Whether a terminated state finished within ``LOG_SETTLE_WINDOW`` seconds of ``now`` (a state
    without a readable ``finishedAt``, which a kubelet always writes, did not)."""
    finished = _moment(_when(state, "finishedAt"))
    if finished is _NEVER:
        return False
    now = now or datetime.datetime.now(datetime.UTC)
    return abs((now - finished).total_seconds()) <= LOG_SETTLE_WINDOW  # a node's clock may run ahead


async def _read_log(
    client: LogReader, *, namespace: str, pod: str, container: str, state: dict[str, Any]
) -> tuple[logs.LogRead, int]:
    """The container's log, read again after short pauses while it is empty and the container
    has just terminated; with the number of extra reads.

    A re-read that fails ends the re-reads and keeps the first read's answer: that read worked,
    and an empty log it returned is evidence too, where a failure would count as a lost read.
    """
    read = await client.pod_logs(namespace=namespace, name=pod, container=container)
    if read.text or not just_terminated(state):
        return read, 0
    rereads = 0
    for pause in LOG_REREAD_PAUSES:
        await asyncio.sleep(pause)
        try:
            again = await client.pod_logs(namespace=namespace, name=pod, container=container)
        except (errors.ApiError, ConnectionError, TimeoutError):
            break
        rereads += 1
        read = again
        if read.text:
            break
    return read, rereads


def last_line(capture: records.StartupCapture) -> str:
    """The newest non-empty log line of the capture (for an Event), or ''."""
    for container in reversed(capture.containers):
        for line in reversed((container.log or "").splitlines()):
            if line.strip():
                return line.strip()
    return ""


def summary(capture: records.StartupCapture) -> str:
    """Why a Pod without a failed container is stuck, in one line: a waiting container's reason and
    message, else the scheduler's condition, else the Pod's phase and reason."""
    for container in capture.waiting or ():
        state = _mapping(container.state.get("waiting"))
        if state.get("reason") and state.get("reason") != "PodInitializing":
            message = str(state.get("message") or "").strip()
            return f"container {container.name} waiting: {state['reason']}" + (
                f" ({message})" if message else ""
            )
    for condition in capture.conditions or ():
        if condition.get("status") == "False" and condition.get("reason") == "Unschedulable":
            return f"unschedulable: {condition.get('message') or 'no node fits'}"
    return f"pod phase {capture.phase or 'unknown'}" + (
        f", reason {capture.reason}" if capture.reason else ""
    )
