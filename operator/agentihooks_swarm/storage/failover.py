"""Evidence written lately, written again when Redis changes its primary, and only while still true.

``REDIS_MIN_REPLICAS`` makes an evidence write wait for that many replicas before the Pod it
describes is deleted. It is not a consensus: when the primary dies, Sentinel may promote a replica
that never had the write (the replica that acknowledged it died too, two failovers in a row, or
``REDIS_MIN_REPLICAS`` is lower than the number of replicas). The write was acknowledged, the Pod
is gone, and the new primary has no record of it.

The leader that wrote it still knows it. :class:`Recent` keeps the evidence this process wrote in
the last ``seconds`` (the launch captures, each cleanup's journal entry, the retained records, and
the owner claims it made: a name whose claim was lost would read as records of an older version;
bounded in bytes), and :class:`PrimaryWatch` looks at the primary's replication id every
``interval`` seconds. A new id (a promoted replica, or a primary started again) means writes may
be missing, and each kept record is put back where it is missing.

A record put back must still be true. What makes a restore safe (docs/redis.md says the same):

* **It belongs to the life that wrote it.** Each kept record carries the name's owner claim as it
  was stored when the record was written (:class:`Written`: the Execution's UID). The restore
  script writes only while that claim is still the owner, or while the name has no owner and that
  UID was never forgotten: ``records forget`` and the retention sweep leave a tombstone per
  forgotten UID (kept :data:`store.TOMBSTONE_SECONDS`, far past this window) that every replica's
  restore honours. A record of a forgotten or replaced life is skipped, and counted.
* **It only adds.** What is stored stays; a restore adds the captures (by Pod UID) and the removed
  objects the stored record lacks (:func:`restored`). Journal versions from two histories cannot be
  compared, so the stored entry is always the base: another writer's ``sent`` flags and outcomes
  are never replaced. The version moves one past the stored one, so a step that read the stored
  entry fails its compare-and-set and reads again.
* **Memory never shrinks.** What this process keeps of a record is the union of the captures it
  wrote for it: a later copy with fewer (a step retried on a lagging replica) never replaces them
  (:meth:`Recent.note`), and a retained record takes the journal's captures with it.
* **The writer restores, leading or not.** Each replica puts back only what it wrote itself, and
  keeps it for the window whether it still holds the Lease or not. A leader whose calls to the API
  server fail loses the Lease within seconds, often in the same minutes as the failover that drops
  its last writes (its renewal late, another replica taking over): it is the only one that knows
  those records. Only the leader writes evidence, so each record has one restorer, its writer,
  and the rules above make a restore true whoever runs it. The newest records go first (the
  oldest are the nearest to leaving the window), and a ``WAIT`` shortfall is counted while the
  pass goes on.

What this cannot bring back: the writes of a process that died too, and any write older than the
window. Redis Cluster (each slot has its own primary) and a Redis that refuses ``INFO`` are not
watched; the watch says so once and :attr:`metrics.Metrics.failover_watched` reads 0.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal, Protocol, TypeVar

from agentihooks_swarm import errors, metrics as metrics_, records

logger = logging.getLogger(__name__)

Kind = Literal["startup", "journal", "retained", "owner"]
#: What a restore's write answered: written; changed meanwhile (read again); the journal entry of
#: a retained execution (none is written); or skipped because the record's life is over.
Answer = Literal["written", "changed", "retained", "owner_changed", "forgotten"]
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
    #: The record as kept (JSON): what was written, with the captures of earlier copies added.
    raw: str
    at: float
    #: The name's owner claim (``execution-owners``, JSON) as stored when the record was written;
    #: empty when the name had none (records of a version before owners).
    owner: str = ""
    #: The UID of the Execution whose life wrote the record ("" when not known): the owner's, read
    #: once (each later note of the same record compares it).
    uid: str = ""


@functools.lru_cache(maxsize=1024)
def owner_uid(owner: str) -> str:
    """The UID in an owner claim's JSON ("" for none, or one that does not parse). Cached: a
    record's claim is the same string for each of its notes."""
    if not owner:
        return ""
    try:
        return records.load(records.Owner, owner).uid
    except ValueError:
        return ""


#: The kinds written once: the first copy stays, and a later one (or ours, in a restore) adds nothing.
_FIRST_WINS: Final[frozenset[Kind]] = frozenset({"startup", "owner"})

#: A kept record's pending merges are folded once this many have come (and at every read), so
#: the copies held for one record stay few.
_FOLD_AT: Final = 8


@dataclasses.dataclass(slots=True, kw_only=True)
class _Kept:
    """One record as kept: the first copy, and the merges still to apply to it in order. The
    merges run when the record is read (:meth:`Recent.entries`, a failover): a note costs no
    parsing, and what it keeps is the same as merging at each note."""

    kind: Kind
    slug: str
    execution: str
    uid: str
    owner: str
    at: float
    #: Bytes kept (every copy, and the owner claim), counted for the byte bound until folded.
    size: int
    first: str
    #: A string: a later copy, merged by :func:`kept_union`; a :class:`_Kept`: the journal entry
    #: this retained record ended, whose captures it takes.
    pending: list[str | _Kept]

    def raw(self) -> str:
        if self.pending:
            kept = self.first
            for step in self.pending:
                if isinstance(step, str):
                    kept = kept_union(kind=self.kind, newer=step, older=kept)
                    continue
                with contextlib.suppress(ValueError):  # Not a record this version reads.
                    kept = kept_union(
                        kind="retained", newer=kept, older=journal_as_retained(step.raw(), kept)
                    )
            self.first, self.pending = kept, []
            self.size = len(kept.encode()) + len(self.owner.encode())
        return self.first


class Recent:
    """The evidence this process wrote lately: one record per kind and execution, each the union of
    the captures written for it by the same life."""

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
        self._items: collections.OrderedDict[tuple[Kind, str, str], _Kept] = collections.OrderedDict()
        self._bytes = 0
        #: Records dropped for the byte bound before their time.
        self.dropped = 0

    def note(self, *, kind: Kind, slug: str, execution: str, raw: str, owner: str = "") -> None:
        """Keep a record that was just written (and acknowledged), with the name's owner claim."""
        uid = owner_uid(owner)
        key = (kind, slug, execution)
        size = len(raw.encode())
        kept = self._items.get(key)
        if kept is not None and kept.uid == uid:
            if kind in _FIRST_WINS:
                size = 0  # The first copy stays (see kept_union): nothing to hold.
            else:
                kept.pending.append(raw)
            kept.at = self._clock()
            self._items.move_to_end(key)
        else:
            self._drop(key)
            size += len(owner.encode())
            kept = _Kept(
                kind=kind,
                slug=slug,
                execution=execution,
                uid=uid,
                owner=owner,
                at=self._clock(),
                size=0,
                first=raw,
                pending=[],
            )
            self._items[key] = kept
        if kind == "retained":
            # The cleanup is over: its journal entry is gone on purpose, and its captures go on
            # in the retained record.
            journal = self._items.pop(("journal", slug, execution), None)
            if journal is not None:
                self._bytes -= journal.size
                if journal.uid == uid:
                    kept.pending.append(journal)
                    size += journal.size
        kept.size += size
        self._bytes += size
        if len(kept.pending) >= _FOLD_AT:
            self._fold(kept)
        self._prune()

    def entries(self) -> list[Written]:
        """The records kept now, oldest first."""
        self._prune()
        found: list[Written] = []
        for kept in self._items.values():
            raw = self._fold(kept)
            found.append(
                Written(
                    kind=kept.kind,
                    slug=kept.slug,
                    execution=kept.execution,
                    raw=raw,
                    at=kept.at,
                    owner=kept.owner,
                    uid=kept.uid,
                )
            )
        return found

    def clear(self) -> None:
        """Keep nothing (this replica no longer leads: the leader restores what it wrote)."""
        self._items.clear()
        self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def _fold(self, kept: _Kept) -> str:
        before = kept.size
        raw = kept.raw()
        self._bytes += kept.size - before
        return raw

    def _drop(self, key: tuple[Kind, str, str]) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.size

    def _prune(self) -> None:
        oldest = self._clock() - self.seconds
        while self._items:
            key, first = next(iter(self._items.items()))
            if first.at >= oldest and self._bytes <= self.max_bytes:
                return
            if first.at >= oldest:
                self.dropped += 1
            self._drop(key)


# --- the rules of a merge: pure ----------------------------------------------------------------


def kept_union(*, kind: Kind, newer: str, older: str) -> str:
    """What :class:`Recent` keeps of a record written again: ``newer`` with every capture (and
    removed object) ``older`` held that it lacks. A launch capture is written once: the first stays."""
    if kind in _FIRST_WINS:
        return older
    try:
        merged = restored(kind=kind, stored=newer, ours=older, bump=False)
    except ValueError:  # Not a record this version reads: kept as written.
        return newer
    return newer if merged is None else merged


def restored(*, kind: Kind, stored: str | None, ours: str, bump: bool = True) -> str | None:
    """What to write so that the stored record loses nothing ours holds; None: nothing to write.

    Pure. Where nothing is stored, ours. A stored launch capture or owner claim is kept (the
    first wins). Otherwise the stored record is the base and only gains: each object's capture it lacks
    (by Pod UID, from any of ours' lists), and each object ours lists that it does not (a removed
    object is a fact: its delete happened; a pinned one is a Pod cleanup must still look at).
    With ``bump`` a journal entry's version moves one past the stored one.
    """
    if stored is None:
        return ours
    if kind in _FIRST_WINS:
        return None
    if kind == "retained":
        kept, mine = records.load(records.Retained, stored), records.load(records.Retained, ours)
        pods = _merged(kept.removed.pods, mine.removed.pods, captures=_captures(mine.removed.pods))
        services = _merged(kept.removed.services, mine.removed.services, captures={})
        if pods is None and services is None:
            return None
        removed = kept.removed.model_copy(
            update={"pods": pods or kept.removed.pods, "services": services or kept.removed.services}
        )
        return records.dump(kept.model_copy(update={"removed": removed}))
    current, journal = records.load(records.Journal, stored), records.load(records.Journal, ours)
    captures = _captures([*journal.pinned.pods, *journal.removed.pods])
    lists = {
        "pinned_pods": _merged(current.pinned.pods, journal.pinned.pods, captures=captures),
        "pinned_services": _merged(current.pinned.services, journal.pinned.services, captures={}),
        "removed_pods": _merged(current.removed.pods, journal.removed.pods, captures=captures),
        "removed_services": _merged(current.removed.services, journal.removed.services, captures={}),
    }
    if all(value is None for value in lists.values()):
        return None
    merged = current.model_copy(
        update={
            "version": (current.version or 0) + 1 if bump else current.version,
            "pinned": records.Objects(
                pods=lists["pinned_pods"] or current.pinned.pods,  # type: ignore[arg-type]
                services=lists["pinned_services"] or current.pinned.services,  # type: ignore[arg-type]
            ),
            "removed": records.RemovedObjects(
                pods=lists["removed_pods"] or current.removed.pods,  # type: ignore[arg-type]
                services=lists["removed_services"] or current.removed.services,  # type: ignore[arg-type]
            ),
        }
    )
    return records.dump(merged)


def journal_as_retained(journal: str, retained: str) -> str:
    """A journal entry's objects as the retained record ``retained`` would hold them: what a
    retain takes with it (the removed objects, and each captured Pod still only pinned: a delete
    sent is ``absent_after_send``, else ``absent``, as cleanup judges a Pod found gone)."""
    entry, shape = records.load(records.Journal, journal), records.load(records.Retained, retained)
    removed = {o.uid for o in entry.removed.pods}
    pods = list(entry.removed.pods) + [
        records.RemovedObject(
            name=o.name,
            uid=o.uid,
            outcome="absent_after_send" if o.sent else "absent",
            startup=o.startup,
            log_reads=o.log_reads,
        )
        for o in entry.pinned.pods
        if o.startup is not None and o.uid not in removed
    ]
    return records.dump(
        shape.model_copy(
            update={"removed": records.RemovedObjects(pods=pods, services=list(entry.removed.services))}
        )
    )


def _captures(
    objects: Sequence[records.PinnedObject | records.RemovedObject],
) -> dict[str, records.StartupCapture]:
    return {o.uid: o.startup for o in objects if o.startup is not None}


def _merged(
    kept: list[_Object], ours: list[_Object], *, captures: dict[str, records.StartupCapture]
) -> list[_Object] | None:
    """``kept`` with each capture it lacks (by UID, from ``captures``) and each object of ``ours``
    it does not list; None when it lacks nothing."""
    listed = {k.uid for k in kept}
    merged: list[_Object] = []
    changed = False
    for k in kept:
        if k.startup is None and k.uid in captures:
            merged.append(k.model_copy(update={"startup": captures[k.uid]}))
            changed = True
        else:
            merged.append(k)
    for o in ours:
        if o.uid not in listed:
            listed.add(o.uid)
            lacks = o.startup is None and o.uid in captures
            merged.append(o.model_copy(update={"startup": captures[o.uid]}) if lacks else o)
            changed = True
    return merged if changed else None


# --- the watch ------------------------------------------------------------------------------


class Store(Protocol):
    """What the watch needs of the store (:class:`.operations.AsyncStore` has it)."""

    async def primary_id(self) -> str | None: ...

    async def read_evidence(self, *, kind: Kind, slug: str, execution: str) -> str | None: ...

    async def replace_evidence(
        self, *, kind: Kind, slug: str, execution: str, expected: str | None, new: str, owner: str
    ) -> Answer: ...


@dataclasses.dataclass(kw_only=True)
class PrimaryWatch:
    """Looks at the primary's replication id; when it changes, restores what :class:`Recent` keeps
    (what this replica wrote), whether it leads now or not."""

    store: Store
    recent: Recent
    metrics: metrics_.Metrics
    interval: float = INTERVAL
    #: Told of each new primary, on every replica (the workers' Redis users are per server, and a
    #: promoted replica or a restarted primary may not have them: swarm/credentials.py).
    on_change: Callable[[], None] | None = None
    #: The replication id last seen, and whether a restore is owed (a change, and no full restore
    #: since: a restore that failed midway is done again on the next look).
    _seen: str | None = None
    _owed: bool = False
    #: Why the topology is not watched, once said (None: watched).
    _unwatched: str | None = None
    _dropped: int = 0

    async def run(self) -> None:
        """Look every ``interval`` seconds until cancelled (a supervised task)."""
        while True:
            await self.check()
            await asyncio.sleep(self.interval)

    async def check(self) -> int | None:
        """One look: the number of records restored (0: none were missing, or no change), or None
        when Redis could not say (unreachable, not a primary, a topology not watched)."""
        self._export()
        try:
            now = await self.store.primary_id()
        except errors.Unwatchable as e:
            self._not_watched(str(e))
            return None
        except errors.StoreUnavailable:
            return None
        if now is None:
            return None
        self._watched()
        if self._seen is not None and now != self._seen:
            self.metrics.primary_changes.inc()
            logger.warning(
                "Redis has a new primary (replication id %s…, was %s…): %s",
                now[:8],
                self._seen[:8],
                f"the {len(self.recent)} evidence records this replica wrote in the last "
                f"{self.recent.seconds:.0f}s are checked and put back where they are missing.",
            )
            self._owed = True
            if self.on_change is not None:
                self.on_change()
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

    def _export(self) -> None:
        self.metrics.recent_evidence_bytes.set(self.recent.bytes)
        if self.recent.dropped > self._dropped:
            self.metrics.recent_evidence_dropped.inc(self.recent.dropped - self._dropped)
            self._dropped = self.recent.dropped

    def _not_watched(self, why: str) -> None:
        self.metrics.failover_watched.set(0)
        if self._unwatched is None:
            self.metrics.evidence_restore_skipped.labels(reason="unwatched").inc()
            logger.warning(
                "The Redis primary is not watched for failovers (%s): evidence a failover loses is "
                "not put back. Use a single server or Sentinel, and REDIS_MIN_REPLICAS (docs/redis.md).",
                why,
            )
        self._unwatched = why

    def _watched(self) -> None:
        self.metrics.failover_watched.set(1)
        if self._unwatched is not None:
            logger.info("The Redis primary is watched for failovers again.")
        self._unwatched = None

    async def _restore(self) -> int:
        entries = self.recent.entries()
        count = shortfalls = 0
        skipped: collections.Counter[str] = collections.Counter()
        # Newest first: the oldest records are the nearest to leaving the window, and the newest
        # hold a name's current life (its owner claim goes back with them before an older life's
        # record is looked at).
        for written in reversed(entries):
            try:
                answer = await self._restore_one(written)
            except errors.NotDurable as e:
                # Written on the primary, not yet on enough replicas: counted; the rest still goes.
                shortfalls += 1
                self.metrics.evidence_restore_wait_shortfalls.inc()
                logger.warning(
                    "Restored the %s record of %s/%s, but %s",
                    written.kind,
                    written.slug,
                    written.execution,
                    e,
                )
                continue
            if answer == "written":
                count += 1
                self.metrics.evidence_restored.labels(record=written.kind).inc()
                logger.warning(
                    "Restored the %s record of %s/%s: the new Redis primary did not have it.",
                    written.kind,
                    written.slug,
                    written.execution,
                )
            elif answer in ("owner_changed", "forgotten"):
                skipped[answer] += 1
                self.metrics.evidence_restore_skipped.labels(reason=answer).inc()
                logger.info(
                    "Did not restore the %s record of %s/%s: %s.",
                    written.kind,
                    written.slug,
                    written.execution,
                    "its records were forgotten since"
                    if answer == "forgotten"
                    else "the name belongs to another Execution now",
                )
        logger.info(
            "%d of %d recent evidence records were missing on the new primary, and restored "
            "(%d skipped: forgotten %d, owner changed %d; %d short of REDIS_MIN_REPLICAS).",
            count,
            len(entries),
            sum(skipped.values()),
            skipped["forgotten"],
            skipped["owner_changed"],
            shortfalls,
        )
        return count

    async def _restore_one(self, written: Written) -> Answer | Literal["unneeded"]:
        kind, ours = written.kind, written.raw
        for _ in range(TRIES):
            stored = await self.store.read_evidence(kind=kind, slug=written.slug, execution=written.execution)
            new = restored(kind=kind, stored=stored, ours=ours)
            if new is None:
                return "unneeded"
            answer = await self.store.replace_evidence(
                kind=kind,
                slug=written.slug,
                execution=written.execution,
                expected=stored,
                new=new,
                owner=written.owner,
            )
            if answer == "retained" and kind == "journal":
                # The execution was retained meanwhile: the journal's captures go into that record.
                retained = await self.store.read_evidence(
                    kind="retained", slug=written.slug, execution=written.execution
                )
                if retained is not None:
                    kind, ours = "retained", journal_as_retained(ours, retained)
                continue
            if answer != "changed":
                return answer
        return "changed"  # Steps keep writing it: they hold it now; the next change tries again.
