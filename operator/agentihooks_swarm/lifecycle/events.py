"""Kubernetes Events on an Execution, behind a two-method protocol.

The steps take an :class:`Events` so they can be run and tested on their own: they note what
happened in a :class:`Collected`, and :func:`post` sends the notes as core/v1 Events once the
step's status is written, under the operator's own reporting component (``kubectl describe``
shows ``agentihooks-swarm`` as their source). A failed post is logged and dropped: Events are
best-effort in Kubernetes, and never hold up a capture or a delete.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

from agentihooks_swarm import errors, text
from agentihooks_swarm.kubernetes import posting

logger = logging.getLogger(__name__)

#: The Events' ``source.component`` and ``reportingComponent``.
COMPONENT: Final = "agentihooks-swarm"


class Events(Protocol):
    def normal(self, *, reason: str, message: str) -> None: ...
    def warning(self, *, reason: str, message: str) -> None: ...


class Collected:
    """Events kept in a list, in the order noted."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, str]] = []

    def normal(self, *, reason: str, message: str) -> None:
        self.items.append(("Normal", reason, message))

    def warning(self, *, reason: str, message: str) -> None:
        self.items.append(("Warning", reason, message))


async def post(
    *,
    client: posting.EventClient,
    involved: Mapping[str, Any],
    notes: Collected,
    instance: str,
    redactor: text.Redactor = text.DEFAULT,
) -> None:
    """Post each note as an Event about ``involved`` (an object reference with its UID), its
    message redacted: an Event quotes a worker's text, and anyone who may list Events reads it."""
    for type_, reason, message in notes.items:
        try:
            await client.post(
                involved=involved,
                type_=type_,
                reason=reason,
                message=text.printable(redactor.redact(message)),
                component=COMPONENT,
                instance=instance,
            )
        except errors.ApiError as e:
            logger.warning(
                "Could not post the %s event of %s/%s: %s",
                reason,
                involved.get("namespace"),
                involved.get("name"),
                e,
            )
