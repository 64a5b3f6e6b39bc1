"""Evidence written lately, written again when Redis changes its primary.

``REDIS_MIN_REPLICAS`` makes an evidence write wait for that many replicas before the Pod it
describes is deleted. It is not a consensus: when the primary dies, Sentinel may promote a replica
that never had the write (the replica that acknowledged it died too, two failovers in a row, or
``REDIS_MIN_REPLICAS`` is lower than the number of replicas). The write was acknowledged, the Pod
is gone, and the new primary has no record of it.

The operator that wrote it still knows it. :class:`Recent` keeps the evidence this process wrote
in the last ``seconds`` (the launch captures, the latest journal entry of each cleanup, the
retained records; bounded in bytes too), and :class:`PrimaryWatch` looks at the primary's
replication id every ``interval`` seconds. A new id (a promoted replica, or a primary started
again) means writes may be missing: each kept record is put back where it is missing, by rules
that never erase anything (:func:`restored`): a launch capture only where there is none (the first
capture wins), a journal entry only if the execution is not retained and the stored entry is older
or lacks a capture this one holds, a retained record where there is none, or with the captures the
stored one lacks. Each write is compare-and-set on the stored value, so a step writing at the same
time makes the restore read again rather than overwrite it.

What this cannot bring back: the writes of a process that died too, and any write older than the
window. It does not apply to Redis Cluster (each slot has its own primary; not watched).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Final, Literal, Protocol, TypeVar

from agentihooks_swarm import errors, metrics as metrics_, records

logger = logging.getLogger(__name__)

Kind = Literal["startup", "journal", "retained"]
_Object = TypeVar("_Object", records.PinnedObject, records.RemovedObject)

#: How long a written record is kept for a restore: a failover (and a second one, after the
#: replica that had the write was promoted and died in turn) is seen within seconds.
SECONDS: Final = 300.0
#: At most this many bytes of records are kept (the oldest go first).
MAX_BYTES: Final = 32 * 1024 * 1024
#: Seconds between looks at the primary's replication id.
INTERVAL: Final = 1.0
#: Compare-and-set attempts of one record's restore before it waits for the next look.
TRIES: Final = 3


@dataclasses.dataclass(frozen=True, slots=True)
class Written:
    kind: Kind
    slug: str
    execution: str
    #: The record as stored (JSON).
    raw: str
    at: float


class Recent:
    """The evidence this process wrote lately, one record per kind and execution (the latest)."""

    def __init__(
        self,
        *,
        seconds: float = SECONDS,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._items: collections.OrderedDict[tuple[Kind, str, str], Written] = collections.OrderedDict()
        self._bytes = 0
        #: Records dropped for the byte bound before their time (for the log and tests).
        self.dropped = 0

    def note(self, *, kind: Kind, slug: str, execution: str, raw: str) -> None:
        """Keep a record that was just written (and acknowledged)."""
        if kind == "retained":  # The cleanup is over: its journal entry is gone on purpose.
            self._drop(("journal", slug, execution))
        key = (kind, slug, execution)
        self._drop(key)
        self._items[key] = Written(kind=kind, slug=slug, execution=execution, raw=raw, at=self._clock())
        self._bytes += len(raw)
        self._prune()

    def entries(self) -> list[Written]:
        """The records kept now, oldest first."""
        self._prune()
        return list(self._items.values())

    @property
    def bytes(self) -> int:
        return self._bytes

    def _drop(self, key: tuple[Kind, str, str]) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= len(old.raw)

    def _prune(self) -> None:
        oldest = self._clock() - self.seconds
        while self._items:
            key, first = next(iter(self._items.items()))
            if first.at >= oldest and self._bytes <= self.max_bytes:
                return
            if first.at >= oldest:
                self.dropped += 1
            self._drop(key)


def restored(*, kind: Kind, stored: str | None, ours: str) -> str | None:
    """What to write so that the stored record loses nothing ours holds; None: nothing to write.

    Pure. A launch capture is written only where there is none. A journal entry or a retained
    record is written where there is none. Where a retained record is stored, the captures ours
    holds and it lacks (by Pod UID) are added to it. Where a journal entry is stored, the newer
    of the two (by version) is kept, with the other's captures it lacks added.
    """
    if stored is None:
        return ours
    if kind == "startup":
        return None
    if kind == "retained":
        kept, mine = records.load(records.Retained, stored), records.load(records.Retained, ours)
        pods = _with_captures(kept.removed.pods, mine.removed.pods)
        if pods is None:
            return None
        return records.dump(
            kept.model_copy(update={"removed": kept.removed.model_copy(update={"pods": pods})})
        )
    current, journal = records.load(records.Journal, stored), records.load(records.Journal, ours)
    ours_newer = (journal.version or 0) > (current.version or 0)
    newer, older = (journal, current) if ours_newer else (current, journal)
    # The newer entry is the base; the other one's captures it lacks are added either way, so
    # neither a step on the new primary nor this restore drops a capture the other one took.
    pinned = _with_captures(newer.pinned.pods, older.pinned.pods)
    removed = _with_captures(newer.removed.pods, older.removed.pods)
    if pinned is None and removed is None:
        return ours if ours_newer else None
    merged = newer.model_copy(
        update={
            # Past the stored version: a step that read the stored entry fails its compare-and-set.
            "version": max(journal.version or 0, (current.version or 0) + 1),
            "pinned": newer.pinned.model_copy(update={"pods": pinned or newer.pinned.pods}),
            "removed": newer.removed.model_copy(update={"pods": removed or newer.removed.pods}),
        }
    )
    return records.dump(merged)


def _with_captures(kept: list[_Object], ours: list[_Object]) -> list[_Object] | None:
    """``kept`` with each capture of ``ours`` it lacks (by UID); None when it lacks none."""
    captured = {o.uid: o for o in ours if o.startup is not None}
    missing = {uid for uid in captured if all(k.uid != uid or k.startup is None for k in kept)}
    if not missing:
        return None
    merged = [
        k.model_copy(update={"startup": captured[k.uid].startup}) if k.uid in missing else k for k in kept
    ]
    merged += [captured[uid] for uid in captured if uid in missing and all(k.uid != uid for k in kept)]
    return merged


class Store(Protocol):
    """What the watch needs of the store (:class:`store.AsyncStore` has it)."""

    async def primary_id(self) -> str | None: ...

    async def read_evidence(self, *, kind: Kind, slug: str, execution: str) -> str | None: ...

    async def replace_evidence(
        self, *, kind: Kind, slug: str, execution: str, expected: str | None, new: str
    ) -> Literal["written", "changed", "retained"]: ...


@dataclasses.dataclass(kw_only=True)
class PrimaryWatch:
    """Looks at the primary's replication id; when it changes, restores what :class:`Recent` keeps."""

    store: Store
    recent: Recent
    metrics: metrics_.Metrics
    interval: float = INTERVAL
    #: The replication id last seen, and whether a restore is owed (a change, and no full restore
    #: since: a restore that failed midway is done again on the next look).
    _seen: str | None = None
    _owed: bool = False

    async def run(self) -> None:
        """Look every ``interval`` seconds until cancelled (a supervised task)."""
        while True:
            await self.check()
            await asyncio.sleep(self.interval)

    async def check(self) -> int | None:
        """One look: the number of records restored (0: none were missing, or no change), or None
        when Redis could not say (unreachable, not a primary, a cluster)."""
        try:
            now = await self.store.primary_id()
        except errors.StoreUnavailable:
            return None
        if now is None:
            return None
        if self._seen is not None and now != self._seen:
            self.metrics.primary_changes.inc()
            logger.warning(
                "Redis has a new primary (replication id %s…, was %s…): the evidence written in the "
                "last %.0fs is checked and put back where it is missing.",
                now[:8],
                self._seen[:8],
                self.recent.seconds,
            )
            self._owed = True
        self._seen = now
        if not self._owed:
            return 0
        try:
            count = await self._restore()
        except errors.StoreUnavailable as e:
            logger.warning("Could not restore the recent evidence yet; the next look tries again: %s", e)
            return None
        self._owed = False
        return count

    async def _restore(self) -> int:
        entries = self.recent.entries()
        count = 0
        for written in entries:
            if await self._restore_one(written):
                count += 1
                self.metrics.evidence_restored.labels(record=written.kind).inc()
                logger.warning(
                    "Restored the %s record of %s/%s: the new Redis primary did not have it.",
                    written.kind,
                    written.slug,
                    written.execution,
                )
        logger.info(
            "%d of %d recent evidence records were missing on the new primary, and restored.",
            count,
            len(entries),
        )
        return count

    async def _restore_one(self, written: Written) -> bool:
        for _ in range(TRIES):
            stored = await self.store.read_evidence(
                kind=written.kind, slug=written.slug, execution=written.execution
            )
            new = restored(kind=written.kind, stored=stored, ours=written.raw)
            if new is None:
                return False
            answer = await self.store.replace_evidence(
                kind=written.kind, slug=written.slug, execution=written.execution, expected=stored, new=new
            )
            if answer != "changed":
                return answer == "written"
        return False  # Steps keep writing it: they hold it now; the next change tries again.
