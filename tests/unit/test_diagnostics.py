"""What counts as refused and the capture's shape, on Pod dicts as the API server sends them."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from agentihooks_swarm import errors, records
from agentihooks_swarm.capture import diagnostics, fingerprints
from agentihooks_swarm.kubernetes import logs

TERMINATED_78 = {
    "exitCode": 78,
    "reason": "Error",
    "message": "planted",
    "startedAt": "2026-10-19T08:00:00Z",
    "finishedAt": "2026-10-19T08:00:01Z",
    "containerID": "containerd://abc",
    "futureField": {"kept": True},
}


def pod(
    *, phase: str = "Running", init: list[Any] | None = None, main: list[Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if init is not None:
        status["initContainerStatuses"] = init
    if main is not None:
        status["containerStatuses"] = main
    return {"metadata": {"name": "swarm-worker-e-1", "namespace": "ns", "uid": "u1"}, "status": status}


def terminated(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": state}}


class Logs:
    """A log reader that answers from a dict: the capture logic's only collaborator."""

    def __init__(
        self,
        texts: dict[str, str | list[str]],
        *,
        error: Exception | None = None,
        events: list[dict[str, Any]] | None = None,
        events_error: Exception | None = None,
    ) -> None:
        self.texts = texts
        self.error = error
        self.events = events or []
        self.events_error = events_error
        self.calls: list[str] = []

    async def pod_logs(self, *, namespace: str, name: str, container: str) -> logs.LogRead:
        self.calls.append(container)
        if self.error is not None:
            raise self.error
        text = self.texts[container]
        if isinstance(text, list):  # One answer per read; the last one repeats.
            text = text.pop(0) if len(text) > 1 else text[0]
        return logs.LogRead(text=text, truncated=False)

    async def pod_events(self, *, namespace: str, uid: str) -> list[dict[str, Any]]:
        self.calls.append(f"events:{uid}")
        if self.events_error is not None:
            raise self.events_error
        return self.events


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (pod(phase="Running", main=[{"name": "worker", "state": {"running": {}}}]), False),
        (pod(phase="Succeeded", main=[terminated("worker", {"exitCode": 0})]), False),
        (pod(phase="Failed", main=[terminated("worker", {"exitCode": 0})]), True),
        (pod(phase="Running", main=[terminated("side", {"exitCode": 1})]), True),
        (pod(phase="Pending", init=[terminated("init", {"exitCode": 2})]), True),
        (pod(phase="Running", main=[terminated("worker", {"signal": 9})]), True),
        ({"metadata": {}}, False),
        ({"status": "garbage"}, False),
        (pod(phase="Running", main=["not a dict", {"name": "x", "state": "odd"}]), False),
    ],
)
def test_is_refused(body: dict[str, Any], refused: bool) -> None:
    assert diagnostics.is_refused(body) is refused


async def test_not_refused_captures_nothing_and_reads_no_log() -> None:
    reader = Logs({})
    assert await diagnostics.startup(pod(main=[terminated("worker", {"exitCode": 0})]), reader) is None
    assert reader.calls == []


async def test_capture_keeps_the_full_terminated_state_and_log_per_container() -> None:
    reader = Logs({"init": "init ok\n", "worker": "worker startup refused: planted kind refusal\n"})
    body = pod(
        phase="Failed",
        init=[terminated("init", {"exitCode": 0, "reason": "Completed"})],
        main=[terminated("worker", TERMINATED_78)],
    )
    body["status"]["reason"] = "Evicted"
    capture = await diagnostics.startup(body, reader)
    assert capture is not None
    assert capture.model_dump(exclude_none=True) == {
        "phase": "Failed",
        "reason": "Evicted",
        "containers": [
            {"name": "init", "terminated": {"exitCode": 0, "reason": "Completed"}, "log": "init ok\n"},
            {
                "name": "worker",
                "terminated": TERMINATED_78,
                "log": "worker startup refused: planted kind refusal\n",
            },
        ],
        "failure_class": "evicted",  # Additive: `class` in JSON.
        "fingerprint": fingerprints.describe(capture)[0],  # Additive: see test_fingerprints.py.
        "fingerprint_text": "worker startup refused: planted kind refusal",
    }
    assert reader.calls == ["init", "worker", "events:u1"]
    assert diagnostics.last_line(capture) == "worker startup refused: planted kind refusal"


async def test_capture_without_logs_has_no_log_field() -> None:
    reader = Logs({})
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", TERMINATED_78)]), reader, read_logs=False
    )
    assert capture is not None
    dumped = records.dump(capture)
    assert '"log"' not in dumped
    assert set(capture.containers[0].model_dump(exclude_none=True)) == {"name", "terminated"}
    assert reader.calls == ["events:u1"]


def finished_ago(seconds: float) -> dict[str, Any]:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return {**TERMINATED_78, "finishedAt": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}


async def test_an_empty_log_of_a_container_that_just_ended_is_read_again_until_it_has_lines() -> None:
    # containerd reports the exit a moment before its log relay writes the last line.
    reader = Logs({"worker": ["", "worker startup refused: late\n"]})
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", finished_ago(1))]), reader
    )
    assert capture is not None
    [container] = capture.containers
    assert container.log == "worker startup refused: late\n"
    assert container.log_rereads == 1
    assert reader.calls == ["worker", "worker", "events:u1"]


async def test_a_log_that_stays_empty_is_read_once_per_pause_then_stored_empty() -> None:
    reader = Logs({"worker": [""]})
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", finished_ago(1))]), reader
    )
    assert capture is not None
    [container] = capture.containers
    assert container.log == ""
    assert container.log_rereads == len(diagnostics.LOG_REREAD_PAUSES)
    assert reader.calls == ["worker"] * (1 + len(diagnostics.LOG_REREAD_PAUSES)) + ["events:u1"]


async def test_an_empty_log_of_a_container_that_ended_long_ago_is_read_once() -> None:
    reader = Logs({"worker": ["", "never read"]})
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", finished_ago(600))]), reader
    )
    assert capture is not None
    assert capture.containers[0].log == ""
    assert capture.containers[0].log_rereads is None
    assert "log_rereads" not in records.dump(capture)
    assert reader.calls == ["worker", "events:u1"]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"finishedAt": "2026-11-30T12:00:00Z"}, True),
        ({"finishedAt": "2026-11-30T11:59:31Z"}, True),
        ({"finishedAt": "2026-11-30T11:59:29Z"}, False),
        ({"finishedAt": "2026-11-30T12:00:05Z"}, True),  # a node clock ahead of the operator's
        ({"finishedAt": "2026-11-30T12:05:00Z"}, False),
        ({}, False),  # a kubelet always writes it: a state without it is no just-ended container
        ({"finishedAt": "garbage"}, False),
    ],
)
def test_just_terminated(state: dict[str, Any], expected: bool) -> None:
    now = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.UTC)
    assert diagnostics.just_terminated(state, now=now) is expected


@pytest.mark.parametrize(
    "error",
    [errors.ApiRefused("403"), errors.ApiUnavailable("429"), errors.ApiTimeout("slow")],
)
async def test_log_read_errors_propagate(error: Exception) -> None:
    with pytest.raises(type(error)):
        await diagnostics.startup(
            pod(phase="Failed", main=[terminated("worker", TERMINATED_78)]), Logs({}, error=error)
        )


def test_error_tree_matches_the_spec() -> None:
    assert issubclass(errors.ApiUnavailable, ConnectionError)
    assert issubclass(errors.ApiTimeout, TimeoutError)
    assert issubclass(errors.PreconditionFailed, errors.ApiRefused)
    assert not issubclass(errors.ApiRefused, ConnectionError)


WAITING_PULL = {
    "name": "worker",
    "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}},
    "lastState": {},
    "ready": False,
}
CONDITIONS = [
    {"type": "PodScheduled", "status": "True"},
    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
]


def event(
    reason: str, last: str, *, count: int = 1, message: str = "m", type_: str = "Warning"
) -> dict[str, Any]:
    return {
        "type": type_,
        "reason": reason,
        "message": message,
        "count": count,
        "firstTimestamp": "2026-11-30T08:00:00Z",
        "lastTimestamp": last,
        "involvedObject": {"kind": "Pod", "uid": "u1"},
        "metadata": {"name": "e", "namespace": "ns", "creationTimestamp": "2026-11-30T08:00:00Z"},
    }


async def test_capture_keeps_waiting_containers_conditions_and_events() -> None:
    body = pod(
        phase="Failed",
        init=[terminated("init", {"exitCode": 0, "reason": "Completed"})],
        main=[WAITING_PULL],
    )
    body["status"].update(reason="DeadlineExceeded", conditions=CONDITIONS)
    reader = Logs(
        {"init": "ok\n"},
        events=[
            event("Pulling", "2026-11-30T08:00:01Z", type_="Normal"),
            event("Failed", "2026-11-30T08:00:09Z", count=4, message='Failed to pull image "x": not found'),
        ],
    )
    capture = await diagnostics.startup(body, reader)
    assert capture is not None
    stored = json.loads(records.dump(capture))
    assert set(stored) == {
        "phase",
        "reason",
        "containers",
        "waiting",
        "conditions",
        "events",
        "class",
        "fingerprint",
        "fingerprint_text",
    }
    assert [c["name"] for c in stored["containers"]] == ["init"]  # Terminated containers only.
    assert stored["waiting"] == [
        {"name": "worker", "state": WAITING_PULL["state"]}
    ]  # Empty lastState left out.
    assert stored["conditions"] == CONDITIONS
    assert stored["events"] == [
        {
            "type": "Warning",
            "reason": "Failed",
            "message": 'Failed to pull image "x": not found',
            "count": 4,
            "first_time": "2026-11-30T08:00:00Z",
            "last_time": "2026-11-30T08:00:09Z",
        },
        {
            "type": "Normal",
            "reason": "Pulling",
            "message": "m",
            "count": 1,
            "first_time": "2026-11-30T08:00:00Z",
            "last_time": "2026-11-30T08:00:01Z",
        },
    ]
    assert stored["class"] == "image_pull"
    assert reader.calls == ["init", "events:u1"]


async def test_waiting_init_containers_are_marked_and_keep_last_state() -> None:
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    body = pod(
        phase="Pending",
        init=[{"name": "init", "state": {"running": {"startedAt": "t"}}, "lastState": last}],
        main=[{"name": "worker", "state": {"waiting": {"reason": "PodInitializing"}}}],
    )
    assert [w.model_dump(exclude_none=True) for w in diagnostics.waiting(body)] == [
        {"name": "init", "init": True, "state": {"running": {"startedAt": "t"}}, "last_state": last},
        {"name": "worker", "state": {"waiting": {"reason": "PodInitializing"}}},
    ]


@pytest.mark.parametrize(
    "error",
    [
        errors.ApiRefused("list events: 403 Forbidden", status=403),
        errors.ApiUnavailable("list events: 503", status=503),
        errors.ApiTimeout("list events: no answer"),
    ],
)
async def test_a_failed_events_read_degrades_to_no_events_field(error: errors.ApiError) -> None:
    reader = Logs({"worker": "bye\n"}, events_error=error)
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", TERMINATED_78)]), reader
    )
    assert capture is not None
    stored = json.loads(records.dump(capture))
    assert "events" not in stored
    assert stored["containers"][0]["log"] == "bye\n"
    expected = {"refused": 403, "unavailable": 503, "timeout": None}
    assert stored["events_error"]["cause"] in expected
    assert stored["events_error"].get("status") == expected[stored["events_error"]["cause"]]
    assert stored["class"] == "exit_code"


async def test_a_container_that_never_ran_has_no_log_and_says_why() -> None:
    """The kubelet's 400 for a container that never ran is not a failed read: the capture goes on."""
    error = errors.ApiRefused(
        'read log: 400 BadRequest: container "worker" in pod "p" is waiting to start: PodInitializing',
        status=400,
        reason="BadRequest",
    )
    never_ran = {k: v for k, v in TERMINATED_78.items() if k != "startedAt"}
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", never_ran)]), Logs({}, error=error)
    )
    assert capture is not None
    [container] = capture.containers
    assert container.log is None
    assert container.log_error is not None
    assert (container.log_error.cause, container.log_error.status) == ("not_started", 400)


async def propagates(error: errors.ApiRefused, *, container: str = "w") -> None:
    """A capture of a Pod whose ``container`` ran (exit 78) raises ``error``, the log read's."""
    with pytest.raises(errors.ApiRefused):
        await diagnostics.startup(
            pod(phase="Failed", main=[terminated(container, TERMINATED_78)]), Logs({}, error=error)
        )


async def test_the_same_answer_about_a_container_that_ran_is_a_failed_read() -> None:
    """The text alone proves nothing: a container with a startedAt had a log, and losing it counts."""
    for text in ("is waiting to start: PodInitializing", "is terminated"):
        error = errors.ApiRefused(f'read log: 400 BadRequest: container "worker" {text}', status=400)
        await propagates(error, container="worker")


async def test_another_400_still_propagates() -> None:
    await propagates(errors.ApiRefused("read log: 400 BadRequest: something else", status=400))


async def test_given_up_reads_keep_the_last_failure_as_log_error() -> None:
    failed = errors.ApiRefused("read log: 403 Forbidden: no pods/log", status=403)
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", TERMINATED_78)]),
        Logs({}),
        read_logs=False,
        failed_read=failed,
    )
    assert capture is not None
    [container] = json.loads(records.dump(capture))["containers"]
    assert set(container) == {"name", "terminated", "log_error"}
    assert container["log_error"] == {"cause": "refused", "status": 403, "message": str(failed)}


def test_events_newest_first_at_most_20() -> None:
    raw = [event("R", f"2026-11-30T08:{minute:02d}:00Z") for minute in range(30)]
    kept = diagnostics.fit_events(raw)
    assert len(kept) == diagnostics.EVENTS_MAX
    assert [e.last_time for e in kept] == [f"2026-11-30T08:{m:02d}:00Z" for m in range(29, 9, -1)]


def test_events_at_most_8_kib() -> None:
    raw = [event("R", f"2026-11-30T08:{m:02d}:00Z", message="x" * 1000) for m in range(15)]
    kept = diagnostics.fit_events(raw)
    assert 0 < len(kept) < 15
    assert len(json.dumps([json.loads(records.dump(e)) for e in kept], separators=(",", ":"))) <= 8 * 1024
    assert kept[0].last_time == "2026-11-30T08:14:00Z"


def test_events_of_the_events_api_and_odd_ones() -> None:
    raw: list[Any] = [
        {
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/1 nodes are available",
            "eventTime": "2026-11-30T08:00:00.000000Z",
            "series": {"count": 7, "lastObservedTime": "2026-11-30T08:05:00.000000Z"},
        },
        "not an event",
        {"message": "x" * 5000},
    ]
    kept = diagnostics.fit_events(raw)
    assert kept[0].model_dump(exclude_none=True) == {
        "type": "Warning",
        "reason": "FailedScheduling",
        "message": "0/1 nodes are available",
        "count": 7,
        "first_time": "2026-11-30T08:00:00.000000Z",
        "last_time": "2026-11-30T08:05:00.000000Z",
    }
    assert kept[1].count == 1 and len(kept[1].message) == diagnostics.EVENT_MESSAGE_MAX


def test_events_sort_by_time_not_by_string_and_ties_by_resource_version() -> None:
    """A kubelet writes whole seconds, the scheduler microseconds: "…:57Z" is older than "…:57.7Z"."""
    raw: list[Any] = [
        {**event("Pulling", "2026-11-30T08:26:57Z"), "metadata": {"resourceVersion": "10"}},
        {**event("Failed", "2026-11-30T08:26:57Z"), "metadata": {"resourceVersion": "12"}},
        {
            "type": "Normal",
            "reason": "Scheduled",
            "message": "assigned",
            "eventTime": "2026-11-30T08:26:56.736939Z",
            "metadata": {"resourceVersion": "9"},
        },
        {**event("Late", "2026-11-30T08:26:57.500000123Z"), "metadata": {"resourceVersion": "5"}},
        {**event("Undated", ""), "metadata": {}},
    ]
    assert [e.reason for e in diagnostics.fit_events(raw)] == [
        "Late",
        "Failed",
        "Pulling",
        "Scheduled",
        "Undated",
    ]


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        (
            records.StartupCapture(
                phase="Pending",
                reason="",
                containers=[],
                waiting=[
                    records.WaitingContainer(
                        name="init", init=True, state={"waiting": {"reason": "PodInitializing"}}
                    ),
                    records.WaitingContainer(
                        name="worker",
                        state={"waiting": {"reason": "CreateContainerConfigError", "message": "no"}},
                    ),
                ],
            ),
            "container worker waiting: CreateContainerConfigError (no)",
        ),
        (
            records.StartupCapture(
                phase="Pending",
                reason="",
                containers=[],
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes",
                    }
                ],
            ),
            "unschedulable: 0/1 nodes",
        ),
        (
            records.StartupCapture(phase="Failed", reason="Evicted", containers=[]),
            "pod phase Failed, reason Evicted",
        ),
        (records.StartupCapture(phase="", reason="", containers=[]), "pod phase unknown"),
    ],
)
def test_summary_says_why_in_one_line(capture: records.StartupCapture, expected: str) -> None:
    assert diagnostics.summary(capture) == expected


#: What a real kubelet reports for a container that never started once it failed the Pod
#: (activeDeadlineSeconds): terminated, never started, no log.
STATUS_UNKNOWN = {
    "exitCode": 137,
    "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
    "startedAt": None,
    "finishedAt": None,
}


async def test_a_terminated_container_that_never_ran_has_no_log_and_says_why() -> None:
    error = errors.ApiRefused(
        'read log: 400 BadRequest: container "worker" in pod "p" is terminated',
        status=400,
        reason="BadRequest",
    )
    capture = await diagnostics.startup(
        pod(phase="Failed", main=[terminated("worker", STATUS_UNKNOWN)]), Logs({}, error=error)
    )
    assert capture is not None
    [container] = capture.containers
    assert container.log is None and container.log_error is not None
    assert (container.log_error.cause, container.log_error.status) == ("not_started", 400)


async def test_is_terminated_for_a_container_that_ran_still_propagates() -> None:
    await propagates(
        errors.ApiRefused('read log: 400 BadRequest: container "w" in pod "p" is terminated', status=400)
    )


async def test_the_waiting_states_noted_at_the_deadline_are_captured() -> None:
    waiting_pod = pod(
        phase="Pending",
        main=[
            {"name": "worker", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}}
        ],
    )
    note = diagnostics.note_waiting(waiting_pod)
    failed = pod(phase="Failed", main=[terminated("worker", STATUS_UNKNOWN)])
    failed["metadata"]["annotations"] = {"swarm.agentihooks.io/waiting-at-deadline": note}
    error = errors.ApiRefused('read log: 400 BadRequest: container "worker" is terminated', status=400)
    capture = await diagnostics.startup(failed, Logs({}, error=error))
    assert capture is not None
    stored = json.loads(records.dump(capture))
    assert stored["waiting_at_deadline"] == [
        {"name": "worker", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}}
    ]
    assert "waiting" not in stored  # the live status has none left
    assert stored["class"] == "image_pull"


@pytest.mark.parametrize("note", ["not json", "[1, 2]", '[{"name": 3, "state": "x"}]', '{"a": 1}'])
def test_a_note_someone_edited_is_ignored(note: str) -> None:
    edited = pod(phase="Failed")
    edited["metadata"]["annotations"] = {"swarm.agentihooks.io/waiting-at-deadline": note}
    assert diagnostics.waiting_at_deadline(edited) == []


def test_the_note_is_at_most_4_kib() -> None:
    many = [
        {"name": f"c{i}", "state": {"waiting": {"reason": "ErrImagePull", "message": "x" * 500}}}
        for i in range(40)
    ]
    note = diagnostics.note_waiting(pod(phase="Pending", main=many))
    assert len(note.encode()) <= diagnostics.WAITING_NOTE_MAX_BYTES
    assert 0 < len(json.loads(note)) < 40
