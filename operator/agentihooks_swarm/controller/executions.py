"""The operator's view of its Executions, fed by one informer: which need a step, which expire.

Memory follows the work in flight, not the history. :class:`Executions` is the informer's handler
for every Execution (:mod:`kubernetes.informer`); of each it keeps either a :class:`lifecycle.model.Tracked`
(while it needs steps: not Done, or being deleted, or changed since it became Invalid) or, for a
Done one with a TTL, only when it expires (:class:`Expiry`, a heap entry of a few hundred bytes).

It decides *what* needs a step, never runs one: a change that calls for a step at once (a new
Execution, a deletion, a new spec or relaunch annotation) is handed to ``wake`` (the lifecycle's
queue), and :meth:`Executions.due` lists every tracked one for the periodic resync.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import heapq
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

from agentihooks_swarm import errors, resources
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import status as status_
from agentihooks_swarm.lifecycle.model import SETTLED, Phase, Tracked

logger = logging.getLogger(__name__)

#: Executions listed per request: memory holds one page at a time (its JSON and the objects
#: decoded from it), and only a tracked view or an expiry is kept of each.
PAGE: Final = 200
#: A spec this size or smaller (about, in JSON bytes) is kept with an Execution not launched yet,
#: so that its launch needs no read: 10,000 waiting cost at most 40 MB. A larger one is read.
SPEC_KEPT: Final = 4096


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _parse(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _newer(version: str, than: str) -> bool:
    """Whether ``version`` is at least as new as ``than`` (etcd's versions are counters; any other
    kind of version is taken as newer)."""
    if version.isdigit() and than.isdigit():
        return int(version) >= int(than)
    return True


def track(body: Mapping[str, Any], *, legacy_finalizers: frozenset[str] = frozenset()) -> Tracked | None:
    """The step's view of an Execution; None when it needs no step (now, or any more).

    ``legacy_finalizers``: finalizers an earlier version put on Executions, released like ours.
    """
    metadata = _mapping(body.get("metadata"))
    status = {k: v for k, v in _mapping(body.get("status")).items() if k != "kopf"}
    spec = _mapping(body.get("spec"))
    finalizers = tuple(str(f) for f in metadata.get("finalizers") or () if isinstance(f, str))
    deleting = bool(metadata.get("deletionTimestamp"))
    relaunch = _mapping(metadata.get("annotations")).get(status_.RELAUNCH_ANNOTATION)
    generation = metadata.get("generation")
    generation = generation if isinstance(generation, int) else None
    phase = status.get("phase")
    ours = {labels.FINALIZER, *legacy_finalizers}
    if deleting and phase == Phase.DONE and not ours.intersection(finalizers):
        return None  # Done and going, not held by us: its cleanup is over.
    if not deleting and phase in SETTLED:
        if phase == Phase.DONE or not status_.relaunchable(status):
            return None
        if not status_.changed_since_launch(status, generation=generation, relaunch=relaunch):
            return None
    name = str(metadata.get("name") or "")
    launching = not deleting and not status.get("hand")
    error = _spec_error(name, spec) if launching else None
    return Tracked(
        namespace=str(metadata.get("namespace") or ""),
        name=name,
        uid=str(metadata.get("uid") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        spec_generation=generation,
        swarm=str(spec.get("swarm") or ""),
        cancel=spec.get("cancel") is True,
        deleting=deleting,
        finalizers=finalizers,
        relaunch=relaunch if isinstance(relaunch, str) else None,
        status=status,
        spec_error=error,
        spec=spec if launching and error is None and _small(spec, budget=SPEC_KEPT) else None,
    )


def _small(value: Any, *, budget: int) -> bool:
    """Whether ``value`` (JSON from the API server) is about ``budget`` bytes or less; stops
    counting once over, so a 1 MB task costs no more to judge than a small one."""
    left = budget
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            left -= len(item) + 3
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                left -= len(str(key)) + 4
                stack.append(inner)
        elif isinstance(item, list):
            left -= 2
            stack.extend(item)
        else:
            left -= 8
        if left < 0:
            return False
    return True


def _spec_error(name: str, spec: Mapping[str, Any]) -> str | None:
    """Why an Execution's spec cannot launch, or None: the verdict the table keeps. An invalid spec
    is answered from it; a valid one is launched from the spec kept (:data:`SPEC_KEPT`), or read
    again at the launch when too large to keep. Its task may be 1 MB, and a read of that may not
    come back in time from a loaded API server: a spec that can never launch would be told
    ``LaunchFailed`` and tried again, instead of ``Invalid``."""
    try:
        resources.parse_execution(name=name, spec=spec)
    except errors.InvalidResource as e:
        return str(e)
    return None


def _wakes(old: Tracked | None, new: Tracked) -> bool:
    """Whether a change calls for a step now rather than at the next resync: a new Execution, or a
    change of what it asks for. Status-only changes (most of them the steps' own) do not."""
    if old is None:
        return True
    return (old.deleting, old.spec_generation, old.relaunch, old.cancel, old.gone) != (
        new.deleting,
        new.spec_generation,
        new.relaunch,
        new.cancel,
        new.gone,
    )


def expires_at(body: Mapping[str, Any], *, default_ttl: int | None, now: float) -> float | None:
    """When a Done Execution expires (epoch seconds), or None: not Done, being deleted, or no TTL.

    The TTL is ``spec.ttlSecondsAfterFinished``, else the operator's default. It counts from
    ``status.finishedAt`` (written when the attempt became Done); an Execution that became Done
    before that field existed counts from its ``CleanedUp`` condition, else from ``now``.
    """
    status = _mapping(body.get("status"))
    if status.get("phase") != Phase.DONE or _mapping(body.get("metadata")).get("deletionTimestamp"):
        return None
    ttl = _mapping(body.get("spec")).get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
        ttl = default_ttl
    if ttl is None:
        return None
    found = status.get("conditions")
    conditions = found if isinstance(found, list) else []
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


class Executions:
    """The Executions that need steps (by UID) and the Done ones' expiry: an informer's handler."""

    def __init__(
        self,
        *,
        expiry: Expiry,
        wake: Callable[[str], None] = lambda uid: None,
        legacy_finalizers: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.expiry = expiry
        self.wake = wake
        self.legacy_finalizers = legacy_finalizers
        self._clock = clock
        self._items: dict[str, Tracked] = {}
        #: The UIDs tracked under each (namespace, name): a worker Pod names its Execution so.
        self._named: dict[tuple[str, str], set[str]] = {}
        self._listed: set[str] | None = None
        #: A step may ask not to be made again before a time (a Swarm that is missing, a retry).
        self._not_before: dict[str, float] = {}
        #: The Done Executions seen at the end of the last full list (for the log and tests).
        self.listed_done = 0
        self._done_in_list = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, uid: str) -> Tracked | None:
        return self._items.get(uid)

    def named(self, namespace: str, name: str) -> tuple[str, ...]:
        """The UIDs of the tracked Executions with this name (two while an old one that was
        deleted still cleans up and a new one took its name)."""
        return tuple(self._named.get((namespace, name), ()))

    def handed(self, namespace: str, name: str) -> bool:
        """Whether a tracked Execution with this name has handed its worker its grant (its status
        says so): a step of it judges its worker's terminal Pod from the watch
        (:class:`worker_pods.WorkerPods`)."""
        for uid in self._named.get((namespace, name), ()):
            tracked = self._items.get(uid)
            hand = tracked.status.get("hand") if tracked is not None else None
            if isinstance(hand, Mapping) and hand.get("handed") is True:
                return True
        return False

    def __iter__(self) -> Iterator[Tracked]:
        return iter(list(self._items.values()))

    def due(self) -> list[str]:
        """Every tracked Execution whose step is not deferred (the resync's list)."""
        now = self._clock()
        return [uid for uid in self._items if self._not_before.get(uid, 0.0) <= now]

    def defer(self, uid: str, *, seconds: float) -> None:
        """The resync skips ``uid`` for ``seconds`` (a change to it still wakes it at once)."""
        self._not_before[uid] = self._clock() + seconds

    # --- informer.Handler ---------------------------------------------------------------------

    def begin(self) -> None:
        self._listed = set()
        self._done_in_list = 0

    def apply(self, kind: str | None, body: Mapping[str, Any]) -> None:
        uid = str(_mapping(body.get("metadata")).get("uid") or "")
        if not uid:
            return
        if kind is None and self._listed is not None:
            self._listed.add(uid)
            self._done_in_list += _mapping(body.get("status")).get("phase") == Phase.DONE
        self.expiry.observe(event=kind, body=body)
        self.observe(uid=uid, kind=kind, body=body)

    def end(self) -> None:
        listed, self._listed = self._listed or set(), None
        for uid, tracked in list(self._items.items()):
            if uid not in listed and not tracked.gone:
                self._vanished(uid, tracked)
        self.listed_done = self._done_in_list
        logger.info(
            "%d Done executions listed, %d of them expire; %d need steps.",
            self.listed_done,
            len(self.expiry),
            len(self._items),
        )

    def needs_relist(self) -> bool:
        return False

    # --- what the table holds ------------------------------------------------------------------

    def observe(self, *, uid: str, kind: str | None, body: Mapping[str, Any]) -> None:
        """One state of an Execution: from the watch, a list, or a step's own write (whichever is
        newest wins: a step's answer may arrive after the watch brought a later change)."""
        old = self._items.get(uid)
        version = str(_mapping(body.get("metadata")).get("resourceVersion") or "")
        if old is not None and not old.gone and version and not _newer(version, old.resource_version):
            return
        if kind == "DELETED":
            if old is not None:
                self._vanished(uid, old)
            return
        tracked = track(body, legacy_finalizers=self.legacy_finalizers)
        if tracked is None:
            self.forget(uid)
            return
        self._hold(uid, tracked)
        if _wakes(old, tracked):
            self.wake(uid)

    def _vanished(self, uid: str, last: Tracked) -> None:
        """Deleted while tracked (its finalizer removed by someone else): an attempt that may have
        a worker still needs its cleanup, from the last view of it; a Done one is forgotten."""
        if last.status.get("phase") == Phase.DONE:
            self.forget(uid)
            return
        gone = dataclasses.replace(last, gone=True, deleting=True)
        self._items[uid] = gone
        self.wake(uid)

    def adopt(self, tracked: Tracked) -> None:
        """Track an Execution that is gone but whose attempt may still need cleanup (found again
        after a restart: :mod:`orphans`); its steps run as for one deleted while tracked."""
        self._hold(tracked.uid, tracked)

    def _hold(self, uid: str, tracked: Tracked) -> None:
        """Track it, and index it by its name (a worker Pod names its Execution so)."""
        self._items[uid] = tracked
        self._named.setdefault((tracked.namespace, tracked.name), set()).add(uid)

    def forget(self, uid: str) -> None:
        tracked = self._items.pop(uid, None)
        self._not_before.pop(uid, None)
        if tracked is not None:
            key = (tracked.namespace, tracked.name)
            uids = self._named.get(key, set())
            uids.discard(uid)
            if not uids:
                self._named.pop(key, None)


#: How long a failed delete of an expired Execution waits before it is tried again.
EXPIRY_RETRY_SECONDS: Final = 10.0


async def run_expiry(
    *,
    expiry: Expiry,
    holds: Callable[[], bool],
    delete: Callable[..., Awaitable[None]],
    tick: float,
) -> None:
    """Delete each Done Execution once its TTL has passed (while leading), by UID."""
    while True:
        await asyncio.sleep(tick)
        if not holds():
            continue
        for namespace, name, uid in expiry.pop_due(now=time.time()):
            try:
                await delete(namespace=namespace, name=name, uid=uid)
            except (errors.NotFound, errors.PreconditionFailed):
                continue  # Gone already, or a new Execution of that name: not ours to expire.
            except errors.ApiError as e:
                logger.warning(
                    "Could not delete the expired execution %s/%s, retrying: %s", namespace, name, e
                )
                expiry.schedule(
                    namespace=namespace, name=name, uid=uid, at=time.time() + EXPIRY_RETRY_SECONDS
                )
                continue
            logger.info(
                "Execution %s/%s expired (ttlSecondsAfterFinished), deleted; its records stay in Redis.",
                namespace,
                name,
            )
