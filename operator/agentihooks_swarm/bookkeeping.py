"""kopf's bookkeeping on our objects: small whatever the size of a valid spec, and written with
the status.

kopf stores the last handled state of each object (its "diff base") to tell a change from the
state it handled, and each handler's progress (retries, when it started). :class:`CompactDiffBase`
and :class:`StatusProgress` keep them in the status (``status.kopf.last-handled-configuration``,
``status.kopf.progress``), not in kopf's default annotations: kopf then writes them with the
status after a handler in one status patch, where annotations (and kopf's marker annotation that
comes with them) cost a second patch of the object, and one more watch event to every watcher,
for every Execution launched (docs/benchmarks.md). An Execution handled by an earlier version
keeps its annotations; they are read while the status has nothing yet, so an upgrade neither
launches again, nor misses a change, nor forgets a handler's retries.

A copy of a large ``spec.task`` (or any large field) in an annotation made every patch fail
with "metadata.annotations: Too long" (the API server's 256 KiB limit), and kopf retried it
forever with no condition to show. So the essence is stored with large values replaced by their
digest (:func:`compact`): a change to a large value still changes its digest, so kopf still sees
every change (its ``old``/``new``/``diff`` then show digests for those fields, which no handler
here reads). The progress records are stored as kopf makes them: they are small (our messages
are trimmed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Final, cast

import kopf

#: Strings longer than this are stored as their digest.
MAX_STRING: Final = 256
#: The largest diff base stored as it is; a larger one keeps only the digest of its spec.
MAX_ESSENCE: Final = 16 * 1024
#: Fields never stored as they are: the task is handed over, never compared field by field.
DIGESTED: Final = (("spec", "task"),)


def digest(value: Any) -> str:
    encoded = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return f"sha256:{hashlib.sha256(encoded).hexdigest()} ({len(encoded)} bytes)"


def _shrink(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_STRING:
        return digest(value)
    if isinstance(value, dict):
        return {k: _shrink(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v) for v in value]
    return value


def _digested(essence: dict[str, Any]) -> dict[str, Any]:
    """``essence`` with each :data:`DIGESTED` field replaced by its digest (copies along the path)."""
    for path in DIGESTED:
        copies = [essence]
        for key in path[:-1]:
            child = copies[-1].get(key)
            if not isinstance(child, dict):
                break
            copies.append(child)
        else:
            if path[-1] in copies[-1]:
                value: Any = digest(copies[-1][path[-1]])
                for parent, key in zip(reversed(copies), reversed(path), strict=False):
                    value = {**parent, key: value}
                essence = value
    return essence


def compact(essence: dict[str, Any]) -> dict[str, Any]:
    """The essence to store: digests instead of the task, long strings, and an oversized spec.

    Built on every watch event (kopf compares it with the stored one), so it copies only what it
    changes: :func:`_shrink` builds new containers and never alters the essence it is given.
    """
    shrunk: dict[str, Any] = _shrink(_digested(essence))
    if len(json.dumps(shrunk, separators=(",", ":"))) > MAX_ESSENCE:
        shrunk = {k: (digest(v) if k != "metadata" else v) for k, v in shrunk.items()}
        if len(json.dumps(shrunk, separators=(",", ":"))) > MAX_ESSENCE:  # Thousands of labels.
            shrunk = {k: digest(v) for k, v in shrunk.items()}
    return shrunk


class CompactDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base as :func:`compact` essences (at most ~16 KiB), in the status."""

    def __init__(self, *, prefix: str) -> None:
        super().__init__()
        self._status = kopf.StatusDiffBaseStorage(name="kopf")
        #: Where kopf's default stored it (before the status): read, and left out of the essence.
        self._annotations = kopf.AnnotationsDiffBaseStorage(prefix=prefix)

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        essence = self._annotations.build(body=body, extra_fields=extra_fields)
        return cast(kopf.BodyEssence, compact(cast(dict[str, Any], essence)))

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        found = self._status.fetch(body=body)
        return found if found is not None else self._annotations.fetch(body=body)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        self._status.store(body=body, patch=patch, essence=essence)

    @property
    def field(self) -> str:
        """The status field, as ``kubectl get -o jsonpath`` names it."""
        return ".".join(self._status.field)


class StatusProgress(kopf.ProgressStorage):
    """kopf's handler progress in ``status.kopf.progress``; an earlier version's annotations read too."""

    def __init__(self, *, prefix: str) -> None:
        super().__init__()
        self._status = kopf.StatusProgressStorage(name="kopf")
        self._annotations = kopf.AnnotationsProgressStorage(prefix=prefix)

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        found = self._status.fetch(key=key, body=body)
        return found if found is not None else self._annotations.fetch(key=key, body=body)

    def store(
        self, *, key: kopf.HandlerId, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch
    ) -> None:
        self._status.store(key=key, record=record, body=body, patch=patch)

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        self._status.purge(key=key, body=body, patch=patch)
        self._annotations.purge(key=key, body=body, patch=patch)  # Only if the body has it.

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        self._status.touch(body=body, patch=patch, value=value)

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return self._annotations.clear(essence=self._status.clear(essence=essence))
