"""Done Executions: kept out of kopf, expired after their TTL, and let go when deleted.

kopf watches only Executions that are not Done (``FIELD_SELECTOR_IN_FLIGHT``, a server-side field
selector on ``status.phase``, which the CRD declares selectable), so it keeps nothing for the
history: an Execution that becomes Done leaves kopf's watch as if deleted, and kopf forgets it.
This module's :class:`Watcher` lists (in pages) and watches every Execution. Each event feeds the
passes' table of Executions in flight (:class:`passes.InFlight`: it keeps only those not Done;
a kopf watch-event handler fed it before, at several times the CPU per event, see
docs/benchmarks.md), and for each Done Execution only what must be acted on is kept:

* **Expiry.** With a TTL (``spec.ttlSecondsAfterFinished``, else the operator's
  ``TTL_SECONDS_AFTER_FINISHED``; neither: kept), :class:`Expiry` holds when it expires (a heap
  entry of a few hundred bytes), and :func:`run_expiry` deletes it then, by UID. Deleting an
  Execution never touches Redis: the final record, the retained evidence and the launch record
  stay, and the records CLI and the spec's read commands answer as before.
* **Deletion.** A Done Execution still carries kopf's finalizer, and kopf, no longer watching it,
  would never remove it. Its cleanup is over (its delete handler would find it Done and do
  nothing), so when a Done Execution is being deleted (after its TTL, or by anyone) the finalizer
  is removed here, and it goes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import heapq
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import pods

logger = logging.getLogger(__name__)

#: What kopf watches: every Execution that is not Done.
FIELD_SELECTOR_IN_FLIGHT: Final = "status.phase!=Done"
#: Executions listed per request: memory holds one page at a time (its JSON and the objects
#: decoded from it, a few hundred KiB at this size), and only an expiry is kept of each Done one
#: (about 260 bytes: measured with tracemalloc on 20,000; 370 before the namespace was shared).
PAGE: Final = 200
#: How long one watch request lasts before it is made again (the API server ends it then).
WATCH_SECONDS: Final = 300
#: How often the expiry task looks at the earliest due Execution.
EXPIRY_TICK_SECONDS: Final = 1.0
#: How long a failed delete (or list) waits before it is tried again.
RETRY_SECONDS: Final = 10.0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _parse(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def expires_at(body: Mapping[str, Any], *, default_ttl: int | None, now: float) -> float | None:
    """When a Done Execution expires (epoch seconds), or None: not Done, being deleted, or no TTL.

    The TTL is ``spec.ttlSecondsAfterFinished``, else the operator's default. It counts from
    ``status.finishedAt`` (written when the attempt became Done); an Execution that became Done
    before that field existed counts from its ``CleanedUp`` condition, else from ``now``.
    """
    status = _mapping(body.get("status"))
    if status.get("phase") != "Done" or _mapping(body.get("metadata")).get("deletionTimestamp"):
        return None
    ttl = _mapping(body.get("spec")).get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
        ttl = default_ttl
    if ttl is None:
        return None
    conditions = _list(status.get("conditions"))
    cleaned = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "CleanedUp"), {})
    start = _parse(status.get("finishedAt")) or _parse(cleaned.get("lastTransitionTime")) or now
    return start + ttl


@dataclasses.dataclass(frozen=True, order=True, slots=True)
class _Due:
    at: float
    uid: str
    namespace: str = dataclasses.field(compare=False)
    name: str = dataclasses.field(compare=False)


class Expiry:
    """Done Executions with a TTL, earliest first."""

    def __init__(self, *, default_ttl: int | None) -> None:
        self.default_ttl = default_ttl
        self._heap: list[_Due] = []
        self._due: dict[str, float] = {}

    def observe(self, *, event: str | None, body: Mapping[str, Any], now: float | None = None) -> None:
        metadata = _mapping(body.get("metadata"))
        uid = str(metadata.get("uid") or "")
        at = None
        if event != "DELETED":
            at = expires_at(body, default_ttl=self.default_ttl, now=time.time() if now is None else now)
        if at is None:
            self._due.pop(uid, None)  # Its heap entry is skipped when it comes up.
            return
        if self._due.get(uid) == at:
            return
        self.schedule(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            uid=uid,
            at=at,
        )

    def schedule(self, *, namespace: str, name: str, uid: str, at: float) -> None:
        self._due[uid] = at
        # One copy of each namespace's name for all its entries (each decoded body brings its own).
        entry = _Due(at=at, uid=uid, namespace=sys.intern(namespace), name=name)
        heapq.heappush(self._heap, entry)

    def pop_due(self, *, now: float) -> list[tuple[str, str, str]]:
        """``(namespace, name, uid)`` of every Execution due by ``now``; they leave the table."""
        due = []
        while self._heap and self._heap[0].at <= now:
            entry = heapq.heappop(self._heap)
            if self._due.get(entry.uid) == entry.at:
                del self._due[entry.uid]
                due.append((entry.namespace, entry.name, entry.uid))
        if len(self._heap) > 2 * len(self._due) + 64:  # Drop entries left behind by forgotten UIDs.
            self._heap = [e for e in self._heap if self._due.get(e.uid) == e.at]
            heapq.heapify(self._heap)
        return due

    def __len__(self) -> int:
        return len(self._due)


def done(body: Mapping[str, Any]) -> bool:
    return _mapping(body.get("status")).get("phase") == "Done"


def _released(body: Mapping[str, Any], *, finalizer: str) -> list[str] | None:
    """The finalizers without kopf's, when a Done Execution is being deleted and still has it.

    Not Done: kopf watches it, and its delete handler removes the finalizer once cleanup is over.
    """
    metadata = _mapping(body.get("metadata"))
    finalizers = _list(metadata.get("finalizers"))
    if not done(body) or not metadata.get("deletionTimestamp") or finalizer not in finalizers:
        return None
    return [f for f in finalizers if f != finalizer]


class Table(Protocol):
    def observe(self, *, event: str | None, body: Mapping[str, Any]) -> None: ...
    def __len__(self) -> int: ...


@dataclasses.dataclass(kw_only=True)
class Watcher:
    """Lists, then watches, the Executions of one namespace (or all: ``namespace=None``)."""

    client: pods.PodClient
    namespace: str | None
    expiry: Expiry
    finalizer: str
    #: Told of every event of every Execution (the passes' table of those in flight).
    inflight: Table
    #: The Done Executions seen at the end of the last full list (for the operator's log and tests).
    listed: int = 0

    async def run(self) -> None:
        while True:
            try:
                version = await self._list()
                while version:
                    version = await self._watch(version)
            except errors.ApiError as e:
                logger.warning("Watching the executions failed, again in %ss: %s", RETRY_SECONDS, e)
                await asyncio.sleep(RETRY_SECONDS)

    async def _list(self) -> str:
        count, version = 0, ""
        async for page in self.client.list_custom_pages(
            namespace=self.namespace, plural="executions", field_selector="", limit=PAGE
        ):
            for item in page.get("items") or []:
                count += done(item)
                await self._seen(event=None, body=item)
            version = str(_mapping(page.get("metadata")).get("resourceVersion") or "")
            del page
        self.listed = count
        logger.info(
            "%d Done executions listed, %d of them expire; %d in flight.",
            count,
            len(self.expiry),
            len(self.inflight),
        )
        return version

    async def _watch(self, version: str) -> str:
        """Follow the watch; the version to go on from, or '' to list again (410 Gone)."""
        async for event in self.client.watch_custom(
            namespace=self.namespace,
            plural="executions",
            field_selector="",
            version=version,
            seconds=WATCH_SECONDS,
        ):
            kind, body = str(event.get("type")), _mapping(event.get("object"))
            if kind == "ERROR":
                logger.info("The watch of executions ended (%s); listing again.", body.get("message"))
                return ""
            version = str(_mapping(body.get("metadata")).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                await self._seen(event=kind, body=body)
        return version

    async def _seen(self, *, event: str | None, body: Mapping[str, Any]) -> None:
        self.inflight.observe(event=event, body=body)
        self.expiry.observe(event=event, body=body)
        # Any replica may let a deleted Done Execution go: it writes no record and deletes nothing.
        remaining = None if event == "DELETED" else _released(body, finalizer=self.finalizer)
        if remaining is None:
            return
        metadata = _mapping(body.get("metadata"))
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        try:
            await self.client.patch_custom(
                namespace=namespace,
                plural="executions",
                name=name,
                body={
                    "metadata": {"finalizers": remaining, "resourceVersion": metadata.get("resourceVersion")}
                },
            )
        except (errors.NotFound, errors.PreconditionFailed):
            return  # Gone, or changed since: the watch brings the newer state.
        logger.info("Execution %s/%s is Done and being deleted: kopf's finalizer removed.", namespace, name)


async def run_expiry(
    *,
    expiry: Expiry,
    holds: Callable[[], bool],
    delete: Callable[..., Awaitable[None]],
    tick: float = EXPIRY_TICK_SECONDS,
) -> None:
    """Delete each Done Execution once its TTL has passed (while leading), by UID."""
    while True:
        await asyncio.sleep(tick)
        if not holds():
            continue
        for namespace, name, uid in expiry.pop_due(now=time.time()):
            try:
                await delete(namespace=namespace, plural="executions", name=name, uid=uid)
            except (errors.NotFound, errors.PreconditionFailed):
                continue  # Gone already, or a new Execution of that name: not ours to expire.
            except errors.ApiError as e:
                logger.warning(
                    "Could not delete the expired execution %s/%s, retrying: %s", namespace, name, e
                )
                expiry.schedule(namespace=namespace, name=name, uid=uid, at=time.time() + RETRY_SECONDS)
                continue
            logger.info(
                "Execution %s/%s expired (ttlSecondsAfterFinished), deleted; its records stay in Redis.",
                namespace,
                name,
            )
