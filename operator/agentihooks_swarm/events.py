"""Kubernetes Events on an Execution, behind a two-method protocol.

The logic modules take an :class:`Events` so they can be run and tested outside a kopf handler;
inside one, :class:`KopfEvents` posts through kopf's own event queue.
"""

from __future__ import annotations

from typing import Any, Protocol

import kopf


class Events(Protocol):
    def normal(self, *, reason: str, message: str) -> None: ...
    def warning(self, *, reason: str, message: str) -> None: ...


class KopfEvents:
    """Events about one object (a kopf ``body``), posted by kopf in the background."""

    def __init__(self, *, body: Any) -> None:
        self._body = body

    # kopf.event, not kopf.info/warn: those obey the posting level, which the operator raises to
    # keep kopf's own handler chatter out of `kubectl describe`; ours must always be posted.
    def normal(self, *, reason: str, message: str) -> None:
        kopf.event(self._body, type="Normal", reason=reason, message=message)

    def warning(self, *, reason: str, message: str) -> None:
        kopf.event(self._body, type="Warning", reason=reason, message=message)


class Collected:
    """Events kept in a list: for tests of the logic modules and for batch tools."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, str]] = []

    def normal(self, *, reason: str, message: str) -> None:
        self.items.append(("Normal", reason, message))

    def warning(self, *, reason: str, message: str) -> None:
        self.items.append(("Warning", reason, message))
