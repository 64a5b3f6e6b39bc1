"""The failure class of a capture: why a worker never started, in one word. Pure, no I/O.

:func:`classify` reads only the captured fields (phase, reason, terminated containers, waiting
containers, conditions, events), so a stored record can be classified again later. The most
specific cause wins over the mechanism that ended the Pod: a worker whose image cannot be
pulled is failed by its startup deadline, and its class is ``image_pull``, not
``deadline_exceeded``. The order, first match wins:

=====================  ===================================================================
``evicted``            the Pod's reason is ``Evicted``
``unschedulable``      the Pod was never scheduled (``PodScheduled`` False), or its reason
                       is ``Unschedulable``
``oom_killed``         a container terminated (now or last time) with ``OOMKilled``
``image_pull``         a container waits on ``ErrImagePull``, ``ImagePullBackOff``,
                       ``InvalidImageName``…, or an Event says the pull failed
``config_error``       a container waits on ``CreateContainerConfigError`` or
                       ``CreateContainerError`` (a missing Secret or ConfigMap, a bad key…),
                       or the kubelet's Event says so (``Error: secret "x" not found``)
``mount``              an Event ``FailedMount`` or ``FailedAttachVolume``
``deadline_exceeded``  the Pod's reason is ``DeadlineExceeded`` (nothing more specific)
``signal``             a container was killed by a signal (exit code 129-192 or ``signal``)
``exit_code``          a container exited with a nonzero exit code
``unknown``            none of the above
=====================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from agentihooks_swarm import records

Class = records.FailureClass

IMAGE_PULL_REASONS: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "SignatureValidationFailed",
        "ImageInspectError",
    }
)
CONFIG_ERROR_REASONS: Final = frozenset({"CreateContainerConfigError", "CreateContainerError"})
MOUNT_EVENT_REASONS: Final = frozenset({"FailedMount", "FailedAttachVolume", "FailedMapVolume"})


def _terminated_states(capture: records.StartupCapture) -> Iterator[dict[str, Any]]:
    for container in capture.containers:
        yield container.terminated
    for waiting in [*(capture.waiting or ()), *(capture.waiting_at_deadline or ())]:
        for state in (waiting.state, waiting.last_state or {}):
            terminated = state.get("terminated")
            if isinstance(terminated, dict):
                yield terminated


def _waiting_reasons(capture: records.StartupCapture) -> set[str]:
    found = set()
    for waiting in [*(capture.waiting or ()), *(capture.waiting_at_deadline or ())]:
        state = waiting.state.get("waiting")
        if isinstance(state, dict) and state.get("reason"):
            found.add(str(state["reason"]))
    return found


def _event_says_pull_failed(event: records.EventCapture) -> bool:
    if event.reason in IMAGE_PULL_REASONS:
        return True
    return event.type == "Warning" and event.reason == "Failed" and "pull" in event.message.lower()


def _event_says_config_missing(event: records.EventCapture) -> bool:
    # The kubelet's Event next to CreateContainerConfigError: 'Error: secret "x" not found'.
    message = event.message.lower()
    return (
        event.type == "Warning"
        and event.reason == "Failed"
        and message.startswith("error: ")
        and ("secret" in message or "configmap" in message)
    )


def _never_scheduled(capture: records.StartupCapture) -> bool:
    if capture.reason == "Unschedulable":
        return True
    for condition in capture.conditions or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return True
    return False


def _killed_by_signal(state: dict[str, Any]) -> bool:
    signal = state.get("signal")
    if isinstance(signal, int) and signal > 0:
        return True
    code = state.get("exitCode")
    return isinstance(code, int) and 128 < code <= 128 + 64


def classify(capture: records.StartupCapture) -> records.FailureClass:
    """The capture's failure class (see the module's table)."""
    if capture.reason == "Evicted":
        return Class.EVICTED
    if _never_scheduled(capture):
        return Class.UNSCHEDULABLE
    terminated = list(_terminated_states(capture))
    if any(state.get("reason") == "OOMKilled" for state in terminated):
        return Class.OOM_KILLED
    waiting = _waiting_reasons(capture)
    events = capture.events or []
    if waiting & IMAGE_PULL_REASONS or any(_event_says_pull_failed(e) for e in events):
        return Class.IMAGE_PULL
    if waiting & CONFIG_ERROR_REASONS or any(_event_says_config_missing(e) for e in events):
        return Class.CONFIG_ERROR
    if any(e.reason in MOUNT_EVENT_REASONS for e in events):
        return Class.MOUNT
    if capture.reason == "DeadlineExceeded":
        return Class.DEADLINE_EXCEEDED
    failed = [state for state in terminated if state.get("exitCode") != 0]
    if any(_killed_by_signal(state) for state in failed):
        return Class.SIGNAL
    if any(isinstance(state.get("exitCode"), int) for state in failed):
        return Class.EXIT_CODE
    return Class.UNKNOWN
