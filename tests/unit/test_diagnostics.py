"""What counts as refused and the capture's shape, on Pod dicts as the API server sends them."""

from __future__ import annotations

from typing import Any

import pytest

from agentihooks_swarm import errors, records
from agentihooks_swarm.kubernetes import diagnostics, logs

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

    def __init__(self, texts: dict[str, str], *, error: Exception | None = None) -> None:
        self.texts = texts
        self.error = error
        self.calls: list[str] = []

    async def pod_logs(self, *, namespace: str, name: str, container: str) -> logs.LogRead:
        self.calls.append(container)
        if self.error is not None:
            raise self.error
        return logs.LogRead(text=self.texts[container], truncated=False)


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
    }
    assert reader.calls == ["init", "worker"]
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
    assert reader.calls == []


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
