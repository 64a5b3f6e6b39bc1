"""The operator's Redis operations (redis-py's asyncio client): :class:`AsyncStore`.

Its methods are the only Redis operations the operator performs; each is one round trip (or one
pipeline). Connection failures and timeouts become
:class:`~agentihooks_swarm.errors.StoreUnavailable`. It works on a single server, a
Sentinel-managed primary and a Redis Cluster (:mod:`.topology`).

Durable before delete: with ``REDIS_MIN_REPLICAS`` = n > 0, each evidence write that a delete
depends on (the launch capture, every journal save, the retained move) is followed on the *same
connection* by ``WAIT n timeout``. WAIT counts the replicas that have the primary's replication
stream up to that connection's last write, so the write and the WAIT travel in one pipeline on
one connection (on a cluster: to the node that owns the swarm's slot). Fewer replicas in time
raises :class:`~agentihooks_swarm.errors.NotDurable`, which keeps the Pod. Each such write
includes a command that always reaches the replication stream (the retention index's ``ZADD`` of
the current time, or an ``HSET``), so the WAIT never passes vacuously on a no-op ``HSETNX``.

Retention: each swarm has a sorted set ``PREFIX:{SLUG}:retention-index`` of execution ids scored
by the time of their last record write, in the swarm's own slot; ``PREFIX:swarms`` lists the
slugs. :meth:`AsyncStore.sweep` removes executions whose cleanup finished longer ago than the
retention, a bounded batch at a time, without ever scanning the keyspace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, TypeVar

import pydantic
import redis.asyncio.cluster
import redis.exceptions

from agentihooks_swarm import errors, metrics as metrics_, records, settings as settings_
from agentihooks_swarm.storage import connection, failover, refusals, restoring, scripts, slugs, topology
from agentihooks_swarm.storage.keys import (
    FINALS,
    FORGOTTEN,
    FORGOTTEN_INDEX,
    HANDS,
    HEARTBEATS,
    JOURNAL,
    LAUNCHED,
    NAMESPACE,
    OUTCOMES,
    OWNERS,
    RETAINED,
    STARTUP_DIAGNOSTICS,
    SWEEP_BATCH,
    SWEPT,
    TOMBSTONE_SECONDS,
    TOMBSTONES_PRUNED,
    Durability,
)

_Record = TypeVar("_Record", records.FinalRecord, records.Outcome, records.Journal)
_Once = TypeVar("_Once", records.FinalRecord, records.Outcome)

_PIN: Final = scripts.load("pin")
_SAVE_JOURNAL: Final = scripts.load("save_journal")
_RETAIN: Final = scripts.load("retain")
_CLEAR_JOURNAL: Final = scripts.load("clear_journal")
_CLAIM: Final = scripts.load("claim")
_CLAIM_IN_SLUG: Final = scripts.load("claim_in_slug")
_SWEEP: Final = scripts.load("sweep")
_WRITE: Final = scripts.load("write")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OtherNamespace:
    """A claim's answer when the swarm's slug is another namespace's: nothing was claimed."""

    namespace: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Swept:
    """One sweep of one swarm: executions removed, and kept because their cleanup is unfinished."""

    removed: int = 0
    kept: int = 0


_Stored = TypeVar("_Stored", bound=pydantic.BaseModel)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttemptRecords:
    """What a controller pass reads of one attempt, read together (:meth:`AsyncStore.read_attempt`).

    Each record is parsed when it is first asked for (once: a pass asks for the heartbeat twice),
    as it was when each was read on its own: a record the pass does not need (a worker's
    heartbeat after the attempt was retained) is never parsed.
    """

    raw: dict[str, Any]

    def _get(self, name: str, model: type[_Stored]) -> _Stored | None:
        value = self.raw.get(name)
        return None if value is None else records.load(model, value)

    @functools.cached_property
    def retained(self) -> records.Retained | None:
        return self._get(RETAINED, records.Retained)

    @functools.cached_property
    def final(self) -> records.FinalRecord | None:
        return self._get(FINALS, records.FinalRecord)

    @functools.cached_property
    def outcome(self) -> records.Outcome | None:
        return self._get(OUTCOMES, records.Outcome)

    @functools.cached_property
    def heartbeat(self) -> records.Heartbeat | None:
        return self._get(HEARTBEATS, records.Heartbeat)

    @functools.cached_property
    def journal(self) -> records.Journal | None:
        return self._get(JOURNAL, records.Journal)

    @functools.cached_property
    def startup(self) -> records.StartupRecord | None:
        return self._get(STARTUP_DIAGNOSTICS, records.StartupRecord)


class AsyncStore(restoring.Restoring):
    """The operator's Redis operations. Every method is one round trip (or one pipeline)."""

    def __init__(
        self,
        *,
        client: topology.AsyncClient,
        prefix: str,
        durability: Durability | None = None,
        metrics: metrics_.Metrics | None = None,
        recent: failover.Recent | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(client=client, prefix=prefix, durability=durability, metrics=metrics, clock=clock)
        #: The evidence this process wrote lately, for a restore after a failover (None: not kept).
        self.recent = recent
        #: The swarms' refusals by fingerprint, and their refusal budgets.
        self.refusals = refusals.Refusals(connection=self)
        #: Which namespace owns each swarm's slug.
        self.slugs = slugs.Slugs(connection=self)

    # --- launch ---------------------------------------------------------------------------------

    async def record_startup(
        self, *, slug: str, execution: str, record: records.StartupRecord, life: str = ""
    ) -> records.StartupRecord:
        """Write a launch capture once (the first capture of an execution wins); return the stored
        one: ``record``, or an earlier capture, which is kept. ``life``: the writing Execution's
        UID; :class:`errors.Forgotten` when that life's records were forgotten (nothing written).

        Durable (see the module docstring) before the delete that depends on it.
        """
        raw = records.dump(record)
        reply, owner = await self._pipeline(
            slug=slug,
            commands=[
                self._write(slug, STARTUP_DIAGNOSTICS, execution, raw, life=life, once=True, index=True),
                ("HGET", self.key(slug, OWNERS), execution),
            ],
            durable=True,
        )
        stored = self._written(reply, execution=execution, life=life)
        self._note("startup", slug=slug, execution=execution, raw=stored or raw, owner=owner or "")
        return record if stored is None else records.load(records.StartupRecord, stored)

    def _write(
        self, slug: str, name: str, execution: str, raw: str, *, life: str, once: bool, index: bool
    ) -> tuple[Any, ...]:
        """The command that writes one record of ``life`` unless it was forgotten (``write.lua``)."""
        return (
            "EVAL",
            _WRITE,
            3,
            self.key(slug, name),
            self.key(slug, FORGOTTEN),
            self._index(slug),
            execution,
            raw,
            life,
            "nx" if once else "set",
            self.clock() if index else "",
        )

    @staticmethod
    def _written(reply: Any, *, execution: str, life: str) -> str | None:
        """What ``write.lua`` answered: None when the record was written, the stored one when an
        earlier write was kept; :class:`errors.Forgotten` for a forgotten life."""
        if str(reply[0]) == "forgotten":
            raise _forgotten(execution=execution, life=life)
        return str(reply[1]) if str(reply[0]) == "kept" else None

    async def read_attempt(self, *, slug: str, execution: str) -> AttemptRecords:
        """Every record of one attempt a step may read, in one round trip (one ``HGET`` each): the
        state at one moment. A step that writes from it may find it changed since (the writes'
        compare-and-set says so), never half-read.
        """
        names = (RETAINED, FINALS, OUTCOMES, HEARTBEATS, JOURNAL, STARTUP_DIAGNOSTICS)
        replies = await self._pipeline(
            slug=slug, commands=[("HGET", self.key(slug, name), execution) for name in names], durable=False
        )
        return AttemptRecords(raw=dict(zip(names, replies, strict=True)))

    async def read_startup(self, *, slug: str, execution: str) -> records.StartupRecord | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, STARTUP_DIAGNOSTICS), execution)
        return None if raw is None else records.load(records.StartupRecord, raw)

    async def save_hand(
        self,
        *,
        slug: str,
        execution: str,
        hand: records.HandResult,
        final: records.FinalRecord | None = None,
        life: str = "",
    ) -> None:
        """Write the hand result; with ``final`` (a refused hand), write it once in the same
        pipeline (an earlier final record is kept, as :meth:`record_final` keeps it).
        :class:`errors.Forgotten` when ``life``'s records were forgotten (nothing written)."""
        commands = [
            self._write(slug, HANDS, execution, records.dump(hand), life=life, once=False, index=True)
        ]
        if final is not None:
            commands.append(
                self._write(slug, FINALS, execution, records.dump(final), life=life, once=True, index=False)
            )
        for reply in await self._pipeline(slug=slug, commands=commands, durable=False):
            self._written(reply, execution=execution, life=life)

    async def recorded_hand(self, *, slug: str, execution: str, uid: str) -> records.HandResult | None:
        """The hand result recorded for ``execution`` while the Execution with ``uid`` owned its
        name (one round trip), or None: a launch whose status was never written is known by it."""
        owner, hand = await self._pipeline(
            slug=slug,
            commands=[("HGET", self.key(slug, name), execution) for name in (OWNERS, HANDS)],
            durable=False,
        )
        if owner is None or hand is None or records.load(records.Owner, owner).uid != uid:
            return None
        return records.load(records.HandResult, hand)

    async def read_hand(self, *, slug: str, execution: str) -> records.HandResult | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, HANDS), execution)
        return None if raw is None else records.load(records.HandResult, raw)

    # --- finals -----------------------------------------------------------------------------------

    async def record_final(
        self, *, slug: str, final: records.FinalRecord, life: str = ""
    ) -> records.FinalRecord:
        """Write an attempt's final record once; return the one that is stored (maybe an earlier
        one). :class:`errors.Forgotten` when ``life``'s records were forgotten."""
        return await self._write_once(slug=slug, name=FINALS, record=final, life=life)

    async def _write_once(self, *, slug: str, name: str, record: _Once, life: str) -> _Once:
        raw = records.dump(record)
        with connection.translated():
            reply = await self.redis.execute_command(
                *self._write(slug, name, record.execution, raw, life=life, once=True, index=False)
            )
        stored = self._written(reply, execution=record.execution, life=life)
        return record if stored is None else records.load(type(record), stored)

    async def read_final(self, *, slug: str, execution: str) -> records.FinalRecord | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, FINALS), execution)
        return None if raw is None else records.load(records.FinalRecord, raw)

    async def read_heartbeat(self, *, slug: str, execution: str) -> records.Heartbeat | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, HEARTBEATS), execution)
        return None if raw is None else records.load(records.Heartbeat, raw)

    async def record_outcome(self, *, slug: str, outcome: records.Outcome, life: str = "") -> records.Outcome:
        """Write an outcome unless the worker reported one first; return the stored one.
        :class:`errors.Forgotten` when ``life``'s records were forgotten."""
        return await self._write_once(slug=slug, name=OUTCOMES, record=outcome, life=life)

    async def read_outcome(self, *, slug: str, execution: str) -> records.Outcome | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, OUTCOMES), execution)
        return None if raw is None else records.load(records.Outcome, raw)

    # --- cleanup ----------------------------------------------------------------------------------

    async def pin_journal(
        self, *, slug: str, journal: records.Journal, life: str = ""
    ) -> records.Journal | records.Retained:
        """Create the journal entry once; return the stored entry, or the retained record when the
        execution is retained already (then no entry is created: see ``_PIN``).
        :class:`errors.Forgotten` when ``life``'s records were forgotten."""
        journal.version = 1
        with connection.translated():
            reply = await self.redis.eval(
                _PIN,
                3,
                self.key(slug, JOURNAL),
                self.key(slug, RETAINED),
                self.key(slug, FORGOTTEN),
                journal.execution,
                records.dump(journal),
                life,
            )
        kind = str(reply[0])
        if kind == "forgotten":
            raise _forgotten(execution=journal.execution, life=life)
        if kind == "retained":
            return records.load(records.Retained, reply[1])
        if kind == "journal":
            return records.load(records.Journal, reply[1])
        return journal

    async def read_journal(self, *, slug: str, execution: str) -> records.Journal | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, JOURNAL), execution)
        return None if raw is None else records.load(records.Journal, raw)

    async def save_journal(self, *, slug: str, journal: records.Journal) -> None:
        """Save the journal entry (its capture, ``sent``, outcomes) over the version it was read at;
        durable before any delete that follows.

        Compare-and-set: raises :class:`errors.StaleWrite` (and writes nothing) when the stored
        entry is no longer the one ``journal`` was read from. On success ``journal.version`` is
        the stored entry's.
        """
        read = journal.version or 0
        journal.version = read + 1
        raw = records.dump(journal)
        try:
            replies = await self._pipeline(
                slug=slug,
                commands=[
                    (
                        "EVAL",
                        _SAVE_JOURNAL,
                        1,
                        self.key(slug, JOURNAL),
                        journal.execution,
                        read,
                        raw,
                    ),
                    ("HGET", self.key(slug, OWNERS), journal.execution),
                ],
                durable=True,
            )
        except BaseException:
            journal.version = read  # Unknown whether it was stored: the next step reads it again.
            raise
        if int(replies[0]) != 1:
            journal.version = read
            what = "was removed" if int(replies[0]) == 0 else "was changed by another write"
            raise errors.StaleWrite(
                f"the cleanup-journal entry of {journal.execution} {what} since this step read it"
            )
        self._note("journal", slug=slug, execution=journal.execution, raw=raw, owner=replies[1] or "")

    async def retain(
        self, *, slug: str, retained: records.Retained, journal_version: int | None, life: str = ""
    ) -> records.Retained:
        """Write the retained record, clear the journal entry and index the execution, atomically.

        The first retain wins: when the execution is retained already, nothing is written and
        the stored record is returned (and a journal entry left beside it goes). A journal entry
        that changed since ``journal_version`` was read (None: that was read as absent, and exists
        now) raises :class:`errors.StaleWrite`; a forgotten ``life``, :class:`errors.Forgotten`.
        One script (all keys in the swarm's slot), durable like the journal saves before it. The
        swarm is listed for the retention sweep first, so a retained record is never unlisted: in
        the same pipeline, ahead of the script, except on a cluster, where that list lives in
        another slot and is written on its own first.
        """
        listed: list[tuple[Any, ...]] = [("SADD", f"{self.prefix}:swarms", slug)]
        if isinstance(self.redis, redis.asyncio.cluster.RedisCluster):
            with connection.translated():
                await self.redis.sadd(f"{self.prefix}:swarms", slug)
            listed = []
        raw = records.dump(retained)
        replies = await self._pipeline(
            slug=slug,
            commands=[
                *listed,
                (
                    "EVAL",
                    _RETAIN,
                    4,
                    self.key(slug, RETAINED),
                    self.key(slug, JOURNAL),
                    self._index(slug),
                    self.key(slug, FORGOTTEN),
                    retained.execution,
                    raw,
                    self.clock(),
                    "" if journal_version is None else journal_version,
                    life,
                ),
                ("HGET", self.key(slug, OWNERS), retained.execution),
            ],
            durable=True,
        )
        reply, owner = replies[-2], replies[-1] or ""
        if int(reply[0]) == 0:
            self._note("retained", slug=slug, execution=retained.execution, raw=str(reply[1]), owner=owner)
            return records.load(records.Retained, reply[1])
        if int(reply[0]) == -2:
            raise _forgotten(execution=retained.execution, life=life)
        if int(reply[0]) != 1:
            raise errors.StaleWrite(
                f"the cleanup-journal entry of {retained.execution} changed since this step read it; "
                "nothing was retained"
            )
        self._note("retained", slug=slug, execution=retained.execution, raw=raw, owner=owner)
        return retained

    async def clear_journal(self, *, slug: str, execution: str) -> bool:
        """Remove a journal entry left beside the execution's retained record; whether one was."""
        with connection.translated():
            removed = await self.redis.eval(
                _CLEAR_JOURNAL, 2, self.key(slug, JOURNAL), self.key(slug, RETAINED), execution
            )
        return bool(removed)

    # --- owners -----------------------------------------------------------------------------------

    async def owner(self, *, slug: str, execution: str) -> records.Owner | None:
        """The Execution that claimed ``execution``'s records, if one did."""
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, OWNERS), execution)
        return None if raw is None else records.load(records.Owner, raw)

    async def claim(
        self, *, slug: str, execution: str, owner: records.Owner, launched: bool = False
    ) -> records.Owner | None:
        """Claim an execution name's records for one Execution (by UID), once.

        Returns the owner: ``owner`` when claimed now or earlier by the same UID, another
        Execution's, or None when the name has records without an owner (an older version's, or
        a claim a failover lost). ``launched``: the claimant owns a worker Pod of this name, so
        records without an owner are its own and it claims them.
        """
        keys = self._claim_keys(slug)
        with connection.translated():
            raw = await self.redis.eval(
                _CLAIM,
                len(keys),
                *keys,
                execution,
                records.dump(owner),
                self.clock(),
                "1" if launched else "0",
            )
        return self._claimed(raw, slug=slug, execution=execution, owner=owner)

    async def claim_in_slug(
        self, *, slug: str, namespace: str, execution: str, owner: records.Owner
    ) -> records.Owner | OtherNamespace | None:
        """:meth:`slugs.Slugs.claim` and :meth:`claim` in one round trip, for a launch that reads
        nothing of the slug's between them: the name is claimed only when the slug is
        ``namespace``'s (claimed now if nobody's); :class:`OtherNamespace` when it is not."""
        keys = [self.key(slug, NAMESPACE), *self._claim_keys(slug)]
        with connection.translated():
            slug_owner, *claimed = await self.redis.eval(
                _CLAIM_IN_SLUG, len(keys), *keys, namespace, execution, records.dump(owner), self.clock(), "0"
            )
        if slug_owner != namespace:
            return OtherNamespace(namespace=slug_owner)
        return self._claimed(claimed[0], slug=slug, execution=execution, owner=owner)

    def _claim_keys(self, slug: str) -> list[str]:
        """The name claim's keys (``name_owner.lua``): the tombstones, owners, the index, every
        hash of LAUNCHED."""
        return [
            self.key(slug, FORGOTTEN),
            self.key(slug, OWNERS),
            self._index(slug),
            *(self.key(slug, name) for name in LAUNCHED),
        ]

    def _claimed(self, raw: Any, *, slug: str, execution: str, owner: records.Owner) -> records.Owner | None:
        if raw == "forgotten":
            raise _forgotten(execution=execution, life=owner.uid)
        if not raw:
            return None
        claimed = records.load(records.Owner, raw)
        if claimed.uid == owner.uid:  # Ours: a failover that loses it is put back like evidence.
            self._note("owner", slug=slug, execution=execution, raw=str(raw), owner=str(raw))
        return claimed

    async def read_retained(self, *, slug: str, execution: str) -> records.Retained | None:
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, RETAINED), execution)
        return None if raw is None else records.load(records.Retained, raw)

    # --- retention --------------------------------------------------------------------------------

    async def swarms(self) -> list[str]:
        """Every swarm that ever retained a record (``PREFIX:swarms``)."""
        with connection.translated():
            found = await self.redis.smembers(f"{self.prefix}:swarms")
        return sorted(str(slug) for slug in found)

    async def sweep(self, *, slug: str, retention_seconds: float, batch: int = SWEEP_BATCH) -> Swept:
        """Remove at most ``batch`` executions of ``slug`` whose last write is older than the retention."""
        now = self.clock()
        # The script reads KEYS[2] (journal) and KEYS[6] (retained), and removes from KEYS[5:].
        keys = [
            self._index(slug),
            self.key(slug, JOURNAL),
            self.key(slug, FORGOTTEN),
            self.key(slug, FORGOTTEN_INDEX),
            self.key(slug, OWNERS),
            self.key(slug, RETAINED),
            *(self.key(slug, name) for name in SWEPT if name not in (RETAINED, OWNERS)),
        ]
        with connection.translated():
            removed, kept, _ = await self.redis.eval(
                _SWEEP,
                len(keys),
                *keys,
                now - retention_seconds,
                now,
                batch,
                TOMBSTONE_SECONDS,
                TOMBSTONES_PRUNED,
            )
        return Swept(removed=int(removed), kept=int(kept))


def _forgotten(*, execution: str, life: str) -> errors.Forgotten:
    """A write for ``life`` that a script refused: its records were forgotten."""
    return errors.Forgotten(
        f"the records of {execution} (Execution UID {life}) were forgotten since this step began; "
        "nothing was written"
    )


@contextlib.asynccontextmanager
async def open_store(
    settings: settings_.Settings, *, metrics: metrics_.Metrics | None = None
) -> AsyncIterator[AsyncStore]:
    """The operator's store for the lifetime of the ``async with`` block."""
    store = AsyncStore(
        client=topology.async_client(settings),
        prefix=settings.key_prefix,
        durability=Durability(
            replicas=settings.redis_min_replicas,
            timeout_seconds=settings.redis_min_replicas_timeout_seconds,
        ),
        metrics=metrics,
        recent=failover.Recent(),
    )
    try:
        yield store
    finally:
        await store.aclose()
