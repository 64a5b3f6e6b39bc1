"""A capture redacted before it is stored, for the setting ``AGENTIHOOKS_SWARM_STORE_REDACTED``.

By default Redis keeps what the worker printed (the spec's ``log``), and only what the operator
shows elsewhere is redacted (``text.py``). With the setting on, the capture itself is redacted
before either deletion path stores it: every text a worker or its kubelet wrote (logs, termination
messages, waiting messages, Event and condition messages) and the capture says so in its additive
``redacted`` field. Nothing is skipped: the capture is the same capture, with secrets replaced.
"""

from __future__ import annotations

from typing import Any

from agentihooks_swarm import records, text
from agentihooks_swarm.capture import diagnostics


def _state(state: dict[str, Any], redactor: text.Redactor) -> dict[str, Any]:
    """A container state (``terminated``, or ``state``/``lastState`` with ``waiting`` inside): its
    ``message`` fields redacted, the rest as reported."""
    redacted: dict[str, Any] = {}
    for key, value in state.items():
        if key == "message" and isinstance(value, str):
            redacted[key] = redactor.redact(value)
        elif isinstance(value, dict):
            redacted[key] = _state(value, redactor)
        else:
            redacted[key] = value
    return redacted


def _waiting(
    items: list[records.WaitingContainer] | None, redactor: text.Redactor
) -> list[records.WaitingContainer] | None:
    if items is None:
        return None
    return [
        w.model_copy(
            update={
                "state": _state(w.state, redactor),
                "last_state": _state(w.last_state, redactor) if w.last_state is not None else None,
            }
        )
        for w in items
    ]


def capture(found: records.StartupCapture, *, redactor: text.Redactor) -> records.StartupCapture:
    """``found`` with every text its Pod's containers and kubelet wrote redacted, and ``redacted``."""
    containers = [
        c.model_copy(
            update={
                "terminated": _state(c.terminated, redactor),
                "log": redactor.redact(c.log) if c.log is not None else None,
            }
        )
        for c in found.containers
    ]
    events = (
        [e.model_copy(update={"message": redactor.redact(e.message)}) for e in found.events]
        if found.events is not None
        else None
    )
    conditions = [_state(c, redactor) for c in found.conditions] if found.conditions is not None else None
    return found.model_copy(
        update={
            "containers": containers,
            "waiting": _waiting(found.waiting, redactor),
            "waiting_at_deadline": _waiting(found.waiting_at_deadline, redactor),
            "events": events,
            "conditions": conditions,
            "fingerprint_text": redactor.redact(found.fingerprint_text)
            if found.fingerprint_text is not None
            else None,
            "redacted": True,
        }
    )


def redacting(inner: diagnostics.Capture, *, redactor: text.Redactor) -> diagnostics.Capture:
    """The capture ``inner`` takes, redacted (:func:`capture`) before the caller stores it."""

    async def redacted(
        pod: dict[str, Any],
        client: diagnostics.Reader,
        *,
        read_logs: bool = True,
        failed_read: BaseException | None = None,
    ) -> records.StartupCapture | None:
        found = await inner(pod, client, read_logs=read_logs, failed_read=failed_read)
        return capture(found, redactor=redactor) if found is not None else None

    return redacted
