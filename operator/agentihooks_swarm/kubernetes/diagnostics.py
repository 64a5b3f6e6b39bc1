"""What counts as refused, and the startup capture of a refused Pod.

:func:`startup` is the one entry point both deletion paths use: launch removal and final
cleanup. It takes a Pod as the API server sent it (a plain dict) and never trusts its shape:
missing or odd status fields make a smaller capture, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from agentihooks_swarm import records
from agentihooks_swarm.kubernetes import logs


class LogReader(Protocol):
    async def pod_logs(self, *, namespace: str, name: str, container: str) -> logs.LogRead: ...


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


async def startup(
    pod: dict[str, Any], client: LogReader, *, read_logs: bool = True
) -> records.StartupCapture | None:
    """Capture a refused Pod's phase, reason, terminated containers and their logs; None if not refused.

    The log read's errors (``ApiRefused``, ``ConnectionError``, ``TimeoutError``) propagate: the
    caller decides whether to keep the Pod or count the failure. With ``read_logs=False`` the
    capture keeps each container's exit state and has no ``log`` field (final cleanup after
    ``LOG_READS`` failed reads).
    """
    if not is_refused(pod):
        return None
    metadata = _mapping(pod.get("metadata"))
    status = _mapping(pod.get("status"))
    containers = []
    for name, state in terminated(pod):
        entry = records.ContainerCapture(name=name, terminated=state)
        if read_logs and name:
            read = await client.pod_logs(
                namespace=str(metadata.get("namespace", "")),
                name=str(metadata.get("name", "")),
                container=name,
            )
            entry.log = read.text
            entry.log_truncated = True if read.truncated else None
        containers.append(entry)
    return records.StartupCapture(
        phase=str(status.get("phase") or ""),
        reason=str(status.get("reason") or ""),
        containers=containers,
    )


def last_line(capture: records.StartupCapture) -> str:
    """The newest non-empty log line of the capture (for an Event), or ''."""
    for container in reversed(capture.containers):
        for line in reversed((container.log or "").splitlines()):
            if line.strip():
                return line.strip()
    return ""
