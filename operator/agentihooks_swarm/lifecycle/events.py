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
#: The note of a finished cleanup, and the notes of how an attempt ended that it joins when one
#: step notes both (the first found, in this order): the attempt's end is told in one Event, not
#: two, since each Event is a write the whole cluster's API server pays for.
CLEANUP_FINISHED: Final = "CleanupFinished"
ENDINGS: Final = ("AttemptFinal", "StartupRefused", "HandRefused")
#: An Event's message, at most (:meth:`posting.EventClient.post` cuts a longer one).
MESSAGE_CHARACTERS: Final = 1024


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


def folded(items: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The notes with a ``CleanupFinished`` joined to the note of how the attempt ended, when the
    step noted one: that note keeps its type and reason, and its message ends with the cleanup's
    (which is kept whole; the ending's own text is cut first if the two are too long)."""
    cleanups = [i for i, item in enumerate(items) if item[1] == CLEANUP_FINISHED]
    ending = next(
        (i for reason in ENDINGS for i, item in enumerate(items) if item[1] == reason),
        None,
    )
    if len(cleanups) != 1 or ending is None:
        return list(items)
    cleanup = items[cleanups[0]][2]
    type_, reason, message = items[ending]
    tail = "; " + (cleanup[:1].lower() + cleanup[1:])
    head = message.rstrip().removesuffix(".")
    room = MESSAGE_CHARACTERS - len(tail)
    if len(head) > room:
        head = head[: max(room - 3, 0)] + "..."
    joined = (type_, reason, head + tail)
    return [joined if i == ending else item for i, item in enumerate(items) if i != cleanups[0]]


async def post(
    *,
    client: posting.EventClient,
    involved: Mapping[str, Any],
    notes: Collected,
    instance: str,
    redactor: text.Redactor = text.DEFAULT,
) -> None:
    """Post each note as an Event about ``involved`` (an object reference with its UID), its
    message redacted: an Event quotes a worker's text, and anyone who may list Events reads it.
    A finished cleanup is told in the Event of how its attempt ended (:func:`folded`)."""
    for type_, reason, message in folded(notes.items):
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
