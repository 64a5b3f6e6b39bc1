"""The Swarms, watched: what a launch reads of its Swarm (:class:`lifecycle.watched.SwarmWatch`).

Each launch read its Swarm with a GET: one request per Execution, for an object that changes
rarely and that kopf and the Swarm status pass already follow. :class:`Swarms` is an informer's
handler that keeps each served namespace's Swarms (without ``managedFields``) and answers a
launch from them while its informer is in sync; :mod:`lifecycle.watched` says why a Swarm a moment
old is safe to launch with and when the launch still asks the API server.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class Swarms:
    """Swarms by namespace and name: an informer's handler, and the launches' Swarm reads."""

    def __init__(self) -> None:
        self._swarms: dict[tuple[str, str], dict[str, Any]] = {}
        self._listed: set[tuple[str, str]] | None = None
        self._synced = False

    def __len__(self) -> int:
        return len(self._swarms)

    def synced(self, value: bool) -> None:
        """Told by the informer whether its view is whole (listed, and watching)."""
        self._synced = value

    def swarm(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """The Swarm as watched (a copy: the launch's to use), or None while the informer is out
        of sync or has not seen it."""
        if not self._synced:
            return None
        found = self._swarms.get((namespace, name))
        return None if found is None else copy.deepcopy(found)

    # --- informer.Handler ---------------------------------------------------------------------

    def begin(self) -> None:
        self._listed = set()

    def apply(self, kind: str | None, body: Mapping[str, Any]) -> None:
        metadata = _mapping(body.get("metadata"))
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if not key[1]:
            return
        if kind == "DELETED":
            self._swarms.pop(key, None)
            return
        if kind is None and self._listed is not None:
            self._listed.add(key)
        kept = {k: v for k, v in body.items() if k != "metadata"}
        kept["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
        self._swarms[key] = kept

    def end(self) -> None:
        listed, self._listed = self._listed or set(), None
        for key in [k for k in self._swarms if k not in listed]:
            del self._swarms[key]

    def needs_relist(self) -> bool:
        return False
