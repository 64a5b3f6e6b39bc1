"""Redis: where the evidence lives.

Every key is ``PREFIX:{SLUG}:NAME``. The braces make the slug a Redis Cluster hash tag, so all
hashes of one swarm sit in one slot and a ``MULTI``/``EXEC`` across them is legal on a cluster
too. Each hash is keyed by execution id.

Two faces:

* :func:`connect` gives a synchronous :class:`Store` for people: the read commands in the README
  (``store = connect(); store.redis.hget(store.key(slug, name), execution)``) print the stored
  JSON as text.
* :func:`open_store` gives the operator's :class:`AsyncStore` (redis-py's asyncio client), whose
  methods are the only Redis operations the operator performs. Connection failures and timeouts
  become :class:`~agentihooks_swarm.errors.StoreUnavailable`.

Both work on a single server, a Sentinel-managed primary and a Redis Cluster (:mod:`topology`).

Durable before delete: with ``REDIS_MIN_REPLICAS`` = n > 0, each evidence write that a delete
depends on (the launch capture, every journal save, the retained move) is followed on the *same
connection* by ``WAIT n timeout``. WAIT counts the replicas that have the primary's replication
stream up to that connection's last write, so the write and the WAIT travel in one pipeline on
one connection (on a cluster: to the node that owns the swarm's slot). Fewer replicas in time
raises :class:`~agentihooks_swarm.errors.StoreUnavailable`, which keeps the Pod. Each such write
includes a command that always reaches the replication stream (the retention index's ``ZADD`` of
the current time, or an ``HSET``), so the WAIT never passes vacuously on a no-op ``HSETNX``.

Retention: each swarm has a sorted set ``PREFIX:{SLUG}:retention-index`` of execution ids scored
by the time of their last record write, in the swarm's own slot; ``PREFIX:swarms`` lists the
slugs. :meth:`AsyncStore.sweep` removes executions whose cleanup finished longer ago than the
retention, a bounded batch at a time, without ever scanning the keyspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import pydantic
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions

from agentihooks_swarm import errors, failover, metrics as metrics_, records, settings as settings_, topology

_Record = TypeVar("_Record", records.FinalRecord, records.Outcome, records.Journal)

STARTUP_DIAGNOSTICS: Final = "attempt-startup-diagnostics"
HANDS: Final = "attempt-hands"
FINALS: Final = "attempt-finals"
HEARTBEATS: Final = "attempt-heartbeats"
OUTCOMES: Final = "attempt-outcomes"
JOURNAL: Final = "cleanup-journal"
RETAINED: Final = "attempt-retained"
RETENTION_INDEX: Final = "retention-index"
#: Which Execution (by UID) an execution name's records belong to (additive, see records.Owner).
OWNERS: Final = "execution-owners"
#: Tombstones of forgotten lives (additive): ``NAME|UID`` (and ``NAME``, for records written
#: without an owner) for each execution whose records ``records forget`` or the retention sweep
#: removed, scored by when in ``forgotten-index``. A failover restore never writes a forgotten
#: life's record back (:mod:`failover`).
FORGOTTEN: Final = "forgotten"
FORGOTTEN_INDEX: Final = "forgotten-index"
#: How long a tombstone is kept: far past the restore's window (failover.SECONDS).
TOMBSTONE_SECONDS: Final = 86_400
#: Tombstones past their time removed by one forget or sweep, at most.
_TOMBSTONES_PRUNED: Final = 100
#: The hash of each kind of evidence a restore puts back (:mod:`failover`).
_EVIDENCE: Final[dict[failover.Kind, str]] = {
    "startup": STARTUP_DIAGNOSTICS,
    "journal": JOURNAL,
    "retained": RETAINED,
}
#: A swarm's refusals by fingerprint (additive): the summary, when each was last seen, and the
#: recent refusals themselves (for counts over a window); the refusal budget's state.
FINGERPRINTS: Final = "refusal-fingerprints"
FINGERPRINTS_SEEN: Final = "refusal-fingerprints-seen"
REFUSALS: Final = "refusals"
BUDGET: Final = "refusal-budget"
#: The fingerprints a swarm keeps (the oldest seen is dropped beyond), the recent refusals kept
#: (the oldest dropped beyond), and for how long (the longest budget window).
MAX_FINGERPRINTS: Final = 100
MAX_REFUSALS_KEPT: Final = 10_000
REFUSALS_HORIZON_SECONDS: Final = 86_400
#: The hashes the retention sweep removes an execution from (never the journal).
SWEPT: Final = (STARTUP_DIAGNOSTICS, HANDS, FINALS, HEARTBEATS, OUTCOMES, RETAINED, OWNERS)
#: Every hash that holds a record of an execution.
RECORDS: Final = (*SWEPT, JOURNAL)
#: The records only the operator writes, after the claim: a name with any of them (and no owner)
#: was used by an Execution of an earlier version. A worker's heartbeat or outcome is not one:
#: it reports for the attempt it was launched for, and only after that launch.
LAUNCHED: Final = (STARTUP_DIAGNOSTICS, HANDS, FINALS, RETAINED, JOURNAL)
#: Executions one sweep script call looks at, at most.
SWEEP_BATCH: Final = 200

#: The journal entry's version, read without parsing the whole entry when it comes first (as
#: records.dump writes it), else from the parsed entry; an entry without one is version 0.
_JOURNAL_VERSION: Final = """
local function version_of(entry)
  local found = string.match(entry, '^{"version":(%d+)[,}]')
  if found then return tonumber(found) end
  local ok, decoded = pcall(cjson.decode, entry)
  if ok and type(decoded) == 'table' and type(decoded['version']) == 'number' then
    return decoded['version']
  end
  return 0
end
"""

#: KEYS[t], KEYS[t+1]: the tombstones and their index. Marks a forgotten life (see FORGOTTEN) and
#: removes tombstones older than the horizon, a bounded batch at a time.
_TOMBSTONE: Final = """
local function owner_uid(owner)
  if not owner then return '' end
  local ok, decoded = pcall(cjson.decode, owner)
  if ok and type(decoded) == 'table' and type(decoded['uid']) == 'string' then return decoded['uid'] end
  return ''
end
local function tombstone(tombs, index, execution, owner, now, horizon, batch)
  local uid = owner_uid(owner)
  local marks = {execution}
  if uid ~= '' then marks[2] = execution .. '|' .. uid end
  for _, mark in ipairs(marks) do
    redis.call('HSET', tombs, mark, now)
    redis.call('ZADD', index, now, mark)
  end
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', now - horizon, 'LIMIT', 0, batch)
  for _, mark in ipairs(old) do
    redis.call('HDEL', tombs, mark)
    redis.call('ZREM', index, mark)
  end
end
"""

#: KEYS: journal, retained. ARGV: execution, the new entry. A journal entry is created once, and
#: never once the execution is retained (a step that read "no journal" before another retained it
#: must not leave a new entry behind; one left beside the retained record by a retain that failed
#: after its write goes). Returns {'pinned'}, {'journal', entry} or {'retained', record}.
_PIN: Final = """
local retained = redis.call('HGET', KEYS[2], ARGV[1])
if retained then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {'retained', retained}
end
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then return {'journal', existing} end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return {'pinned'}
"""

#: KEYS: journal. ARGV: execution, the version the writer read, the new entry (one version on).
#: 1: saved; 0: the entry is gone (retained or removed meanwhile); -1: another write came first.
_SAVE_JOURNAL: Final = (
    _JOURNAL_VERSION
    + """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if version_of(current) ~= tonumber(ARGV[2]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""
)

#: The journal→retained move: one script, so no other command comes between its steps; legal on
#: a cluster (one slot). A script that fails midway keeps what it wrote before (Redis has no
#: rollback), so the evidence is written first and the journal entry goes last: at worst both
#: are there, and :meth:`AsyncStore.clear_journal` removes the entry later.
#: KEYS: retained, journal, index. ARGV: execution, the retained record, now, the journal version
#: the writer read. The first retain wins: {0, stored} when one is there already; {-1} when the
#: journal changed (or went) since it was read; {1} when this one is stored.
_RETAIN: Final = (
    _JOURNAL_VERSION
    + """
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then return {0, stored} end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if not current or version_of(current) ~= tonumber(ARGV[4]) then return {-1} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {1}
"""
)

#: A restore after Redis changed its primary (:mod:`failover`): compare-and-set on the stored value,
#: and only for the life that wrote the record. KEYS: the record's hash, retained, journal, index,
#: owners, tombstones. ARGV: execution, the value the restore read, the record to write, now, '1'
#: when it read none, the record's kind, the owner claim (JSON) stored when the record was written
#: ('' for none). The claim must still be the owner, or the name have none and that life (or, for a
#: record written without an owner, the name) no tombstone: else 'owner_changed' or 'forgotten'.
#: An owner claim missing on the new primary goes back with the record. A journal entry is never
#: written beside a retained record; a restored retained record ends the journal entry, as a retain does.
_RESTORE: Final = (
    _TOMBSTONE
    + """
local uid = owner_uid(ARGV[7])
local owner = redis.call('HGET', KEYS[5], ARGV[1])
if owner then
  if owner_uid(owner) ~= uid or uid == '' then return 'owner_changed' end
else
  local mark = ARGV[1]
  if uid ~= '' then mark = ARGV[1] .. '|' .. uid end
  if redis.call('HEXISTS', KEYS[6], mark) == 1 then return 'forgotten' end
end
if ARGV[6] == 'journal' and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 'retained' end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[5] == '1' then
  if stored then return 'changed' end
elseif stored ~= ARGV[2] then
  return 'changed'
end
if not owner and uid ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[7]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
if ARGV[6] == 'retained' then redis.call('HDEL', KEYS[3], ARGV[1]) end
return 'written'
"""
)

#: KEYS: journal, retained. ARGV: execution. A journal entry left beside a retained record (a retain
#: that failed after its write) goes; an entry of a cleanup in progress is never touched.
_CLEAR_JOURNAL: Final = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
"""

#: KEYS: fingerprints, seen, refusals. ARGV: fingerprint, now (epoch s), now (RFC 3339), member
#: (fingerprint|pod uid), the summary of a new fingerprint (JSON), max fingerprints, horizon, max
#: refusals kept. Counts one refused Pod once (0 when it was counted already), bounded: the oldest
#: seen fingerprint goes beyond the max, refusals older than the horizon or beyond the max go.
_NOTE_REFUSAL: Final = """
if redis.call('ZSCORE', KEYS[3], ARGV[4]) then return 0 end
local now = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[7]))
local extra = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[8])
if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, extra - 1) end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
local summary
if stored then
  summary = cjson.decode(stored)
  summary['count'] = summary['count'] + 1
  summary['last_seen'] = ARGV[3]
else
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if oldest then
      redis.call('HDEL', KEYS[1], oldest)
      redis.call('ZREM', KEYS[2], oldest)
    end
  end
  summary = cjson.decode(ARGV[5])
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(summary))
redis.call('ZADD', KEYS[2], now, ARGV[1])
return 1
"""

#: KEYS: refusals, budget, fingerprints. ARGV: now (epoch s), now (RFC 3339), window, max refusals,
#: same fingerprint ('1' or ''), the template's digest, the reset annotation's value.
#: Returns {'tripped', state}, {'cleared', the old state} or {'ok'}. A tripped budget stays tripped
#: until the template or the reset annotation differs from when it tripped; clearing it starts the
#: count afresh (refusals before the clearing do not count).
_BUDGET: Final = """
local now = tonumber(ARGV[1])
local state = redis.call('HGET', KEYS[2], 'state')
if state then
  local tripped = cjson.decode(state)
  if tripped['template'] == ARGV[6] and tripped['reset'] == ARGV[7] then return {'tripped', state} end
  redis.call('HDEL', KEYS[2], 'state')
  redis.call('HSET', KEYS[2], 'since', now)
  return {'cleared', state}
end
local since = tonumber(redis.call('HGET', KEYS[2], 'since') or '0')
local from = math.max(now - tonumber(ARGV[3]), since)
local counts, total = {}, 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. from, '+inf')) do
  local fingerprint = string.match(member, '^([^|]*)|')
  counts[fingerprint] = (counts[fingerprint] or 0) + 1
  total = total + 1
end
local worst, most = nil, 0
for fingerprint, count in pairs(counts) do
  if count > most or (count == most and fingerprint < worst) then worst, most = fingerprint, count end
end
local count = total
if ARGV[5] == '1' then count = most end
if worst == nil or count < tonumber(ARGV[4]) then return {'ok'} end
local text = ''
local summary = redis.call('HGET', KEYS[3], worst)
if summary then text = cjson.decode(summary)['text'] end
state = cjson.encode({fingerprint = worst, text = text, count = count, window_seconds = tonumber(ARGV[3]),
  at = ARGV[2], template = ARGV[6], reset = ARGV[7]})
redis.call('HSET', KEYS[2], 'state', state)
return {'tripped', state}
"""

#: KEYS: owners, index, then every hash of LAUNCHED. ARGV: execution, the claim, now.
#: Returns the owner's record: the claim when it is stored now, an earlier one, or '' when the
#: name has records without an owner (written before owners existed).
_CLAIM: Final = """
local owner = redis.call('HGET', KEYS[1], ARGV[1])
if owner then return owner end
for i = 3, #KEYS do
  if redis.call('HEXISTS', KEYS[i], ARGV[1]) == 1 then return '' end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return ARGV[2]
"""

#: KEYS: index, tombstones, their index, owners, journal, then every other hash of RECORDS. ARGV:
#: execution, force ('1'), now, the tombstones' horizon, their batch. Removes every record of the
#: execution and leaves its tombstone; refuses (-1) while a journal entry exists, unless forced.
_FORGET: Final = (
    _TOMBSTONE
    + """
if ARGV[2] ~= '1' and redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then return -1 end
local owner = redis.call('HGET', KEYS[4], ARGV[1])
local removed = 0
for i = 4, #KEYS do removed = removed + redis.call('HDEL', KEYS[i], ARGV[1]) end
redis.call('ZREM', KEYS[1], ARGV[1])
tombstone(KEYS[2], KEYS[3], ARGV[1], owner, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
return removed
"""
)

#: KEYS: index, journal, tombstones, their index, owners, retained, then every other swept hash.
#: ARGV: cutoff, now, batch, the tombstones' horizon, their batch.
#: An execution with a journal entry (cleanup unfinished) or without a retained record (still
#: running) is kept and looked at again one retention later; its index score moves to now. One
#: removed leaves its tombstone, as a forget does.
_SWEEP: Final = (
    _TOMBSTONE
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local removed, kept = 0, 0
for _, execution in ipairs(due) do
  if redis.call('HEXISTS', KEYS[2], execution) == 1 or redis.call('HEXISTS', KEYS[6], execution) == 0 then
    redis.call('ZADD', KEYS[1], ARGV[2], execution)
    kept = kept + 1
  else
    local owner = redis.call('HGET', KEYS[5], execution)
    for i = 5, #KEYS do redis.call('HDEL', KEYS[i], execution) end
    redis.call('ZREM', KEYS[1], execution)
    tombstone(KEYS[3], KEYS[4], execution, owner, tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]))
    removed = removed + 1
  end
end
return {removed, kept, #due}
"""
)


_ANSWERS: Final[tuple[failover.Answer, ...]] = (
    "written",
    "changed",
    "retained",
    "owner_changed",
    "forgotten",
)

#: Redirections while a slot moves or a cluster fails over: the write is sent again, this often.
_REDIRECTED_TRIES: Final = 20
_REDIRECTIONS = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


def key(prefix: str, slug: str, name: str) -> str:
    """The Redis key of hash ``name`` of swarm ``slug``."""
    return f"{prefix}:{{{slug}}}:{name}"


class Store:
    """Synchronous access for people and scripts; see the module docstring."""

    def __init__(
        self,
        *,
        client: topology.SyncClient,
        prefix: str,
        durability: Durability | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = client
        self.prefix = prefix
        self.durability = durability or Durability()
        self._clock = clock

    def key(self, slug: str, name: str) -> str:
        return key(self.prefix, slug, name)

    def forget(self, *, slug: str, execution: str, force: bool = False) -> int | None:
        """Remove every record of ``execution`` (so its name can be used again) and leave its
        tombstone, which a failover restore honours: the count of records removed, or None when
        its cleanup is unfinished (a journal entry) and not ``force``.

        Durable like an evidence write (``REDIS_MIN_REPLICAS``): a failover must not bring back
        a name whose new life has started. Fewer replicas in time raise
        :class:`errors.NotDurable` (the records are removed on the primary).
        """
        keys = [
            key(self.prefix, slug, RETENTION_INDEX),
            self.key(slug, FORGOTTEN),
            self.key(slug, FORGOTTEN_INDEX),
            self.key(slug, OWNERS),
            self.key(slug, JOURNAL),
        ]
        keys += [self.key(slug, name) for name in RECORDS if name not in (JOURNAL, OWNERS)]
        pipe = self.redis.pipeline(transaction=False)
        pipe.eval(
            _FORGET,
            len(keys),
            *keys,
            execution,
            "1" if force else "0",
            self._clock(),
            TOMBSTONE_SECONDS,
            _TOMBSTONES_PRUNED,
        )
        # On a cluster WAIT would reach some node, not the one that owns the swarm's slot.
        wanted = 0 if isinstance(self.redis, redis.cluster.RedisCluster) else self.durability.replicas
        if wanted > 0:
            pipe.execute_command("WAIT", wanted, int(self.durability.timeout_seconds * 1000))
        replies = pipe.execute()
        removed = int(replies[0])
        if wanted > 0 and removed >= 0 and int(replies[1]) < wanted:
            raise errors.NotDurable(
                f"the records of {execution!r} were removed on the Redis primary, but {int(replies[1])} of "
                f"{wanted} replicas acknowledged it (REDIS_MIN_REPLICAS); wait until the replicas are in "
                "sync before using the name again"
            )
        return None if removed < 0 else removed


def connect(settings: settings_.Settings | None = None) -> Store:
    """Connect as the controller does, from its ``AGENTIHOOKS_SWARM_*`` environment."""
    settings = settings_.Settings.from_env() if settings is None else settings
    return Store(
        client=topology.sync_client(settings),
        prefix=settings.key_prefix,
        durability=Durability(
            replicas=settings.redis_min_replicas,
            timeout_seconds=settings.redis_min_replicas_timeout_seconds,
        ),
    )


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    # Not only outages: a Redis that refuses the command (ACL, OOM, a read-only replica) has not
    # stored the evidence either, and must keep the Pod just the same.
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
        raise errors.StoreUnavailable(f"Redis is unavailable: {errors.trim(str(e))}") from e
    except redis.exceptions.RedisError as e:
        refusal = f"{type(e).__name__}: {errors.trim(str(e))}"
        raise errors.StoreUnavailable(f"Redis refused the command: {refusal}") from e


@dataclasses.dataclass(frozen=True, kw_only=True)
class Durability:
    """How many replicas must acknowledge an evidence write, and how long WAIT waits for them."""

    replicas: int = 0
    timeout_seconds: float = 2.0


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


class AsyncStore:
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
        self.redis = client
        self.prefix = prefix
        self.durability = durability or Durability()
        self.metrics = metrics
        #: The evidence this process wrote lately, for a restore after a failover (None: not kept).
        self.recent = recent
        self._clock = clock

    def key(self, slug: str, name: str) -> str:
        return key(self.prefix, slug, name)

    def _index(self, slug: str) -> str:
        return self.key(slug, RETENTION_INDEX)

    async def _pipeline(self, *, slug: str, commands: Sequence[tuple[Any, ...]], durable: bool) -> list[Any]:
        """Send ``commands`` (all in the swarm's slot) on one connection, then WAIT when ``durable``.

        Returns the commands' replies (without WAIT's). Raises :class:`errors.StoreUnavailable`
        when a command fails or fewer than ``durability.replicas`` replicas acknowledged in time.
        """
        wait = durable and self.durability.replicas > 0
        tail: list[tuple[Any, ...]] = (
            [("WAIT", self.durability.replicas, int(self.durability.timeout_seconds * 1000))] if wait else []
        )
        with _translated():
            if isinstance(self.redis, redis.asyncio.cluster.RedisCluster):
                replies = await self._cluster_pipeline(slug=slug, commands=[*commands, *tail])
            else:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for command in [*commands, *tail]:
                        pipe.execute_command(*command)
                    replies = await pipe.execute()
        if wait:
            acknowledged = int(replies[-1])
            ok = acknowledged >= self.durability.replicas
            if self.metrics is not None:
                self.metrics.replica_waits.labels(result="acknowledged" if ok else "timeout").inc()
            if not ok:
                raise errors.NotDurable(
                    f"Redis: {acknowledged} of {self.durability.replicas} replicas acknowledged the "
                    f"write within {self.durability.timeout_seconds}s (REDIS_MIN_REPLICAS); it is not "
                    "durable yet"
                )
            replies = replies[:-1]
        return list(replies)

    async def _cluster_pipeline(self, *, slug: str, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """All commands to the node owning the swarm's slot, on one of its connections.

        redis-py would follow a MOVED/ASK for each command on its own, on another connection, where
        a WAIT would no longer count this write. So redirections are not followed: the slot map is
        refreshed and the whole pipeline (idempotent writes) is sent again.
        """
        client = self.redis
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        for attempt in range(_REDIRECTED_TRIES):
            await client.initialize()  # Once; a no-op afterwards.
            try:
                node = client.get_node_from_key(self._index(slug))
            except redis.exceptions.SlotNotCoveredError:
                node = None
            if node is None:
                if attempt == _REDIRECTED_TRIES - 1:
                    raise redis.exceptions.ClusterDownError(f"no node serves the slot of swarm {slug!r}")
                await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
                await client.nodes_manager.initialize()
                continue
            pipe = client.pipeline()
            for command in commands:
                pipe.execute_command(*command, target_nodes=node)
            replies = await pipe.execute(raise_on_error=False, allow_redirections=False)
            failed = [r for r in replies if isinstance(r, Exception)]
            if not failed:
                return list(replies)
            if not isinstance(failed[0], _REDIRECTIONS) or attempt == _REDIRECTED_TRIES - 1:
                raise failed[0]
            await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
            await client.nodes_manager.initialize()
        raise AssertionError("unreachable")

    async def _write_once(self, name: str, field: str, record: _Record) -> _Record:
        """``HSETNX`` a record; return the stored one: ours (one round trip) or the earlier one."""
        with _translated():
            if await self.redis.hsetnx(name, field, records.dump(record)):
                return record
            raw = await self.redis.hget(name, field)
        # Gone between the two calls (only by hand): ours is what we meant to keep.
        return record if raw is None else records.load(type(record), raw)

    async def ping(self) -> None:
        with _translated():
            await self.redis.ping()

    async def aclose(self) -> None:
        await self.redis.aclose()

    # --- launch ---------------------------------------------------------------------------------

    async def record_startup(
        self, *, slug: str, execution: str, record: records.StartupRecord
    ) -> records.StartupRecord:
        """``HSETNX`` a launch capture; return the stored one: ``record``, or an earlier capture,
        which is kept (the first capture of an execution wins).

        Durable (see the module docstring) before the delete that depends on it.
        """
        name = self.key(slug, STARTUP_DIAGNOSTICS)
        raw = records.dump(record)
        replies = await self._pipeline(
            slug=slug,
            commands=[
                ("HSETNX", name, execution, raw),
                ("ZADD", self._index(slug), self._clock(), execution),
                ("HGET", name, execution),
                ("HGET", self.key(slug, OWNERS), execution),
            ],
            durable=True,
        )
        owner = replies[3] or ""
        if replies[0] or replies[2] is None:
            self._note("startup", slug=slug, execution=execution, raw=raw, owner=owner)
            return record
        self._note("startup", slug=slug, execution=execution, raw=str(replies[2]), owner=owner)
        return records.load(records.StartupRecord, replies[2])

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
        with _translated():
            raw = await self.redis.hget(self.key(slug, STARTUP_DIAGNOSTICS), execution)
        return None if raw is None else records.load(records.StartupRecord, raw)

    async def save_hand(
        self,
        *,
        slug: str,
        execution: str,
        hand: records.HandResult,
        final: records.FinalRecord | None = None,
    ) -> None:
        """``HSET`` the hand result; with ``final`` (a refused hand), ``HSETNX`` it in the same pipeline.

        An earlier final record is kept, as :meth:`record_final` keeps it.
        """
        commands: list[tuple[Any, ...]] = [
            ("HSET", self.key(slug, HANDS), execution, records.dump(hand)),
            ("ZADD", self._index(slug), self._clock(), execution),
        ]
        if final is not None:
            commands.append(("HSETNX", self.key(slug, FINALS), execution, records.dump(final)))
        await self._pipeline(slug=slug, commands=commands, durable=False)

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
        with _translated():
            raw = await self.redis.hget(self.key(slug, HANDS), execution)
        return None if raw is None else records.load(records.HandResult, raw)

    # --- finals -----------------------------------------------------------------------------------

    async def record_final(self, *, slug: str, final: records.FinalRecord) -> records.FinalRecord:
        """Write an attempt's final record once; return the one that is stored (maybe an earlier one)."""
        return await self._write_once(self.key(slug, FINALS), final.execution, final)

    async def read_final(self, *, slug: str, execution: str) -> records.FinalRecord | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, FINALS), execution)
        return None if raw is None else records.load(records.FinalRecord, raw)

    async def read_heartbeat(self, *, slug: str, execution: str) -> records.Heartbeat | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, HEARTBEATS), execution)
        return None if raw is None else records.load(records.Heartbeat, raw)

    async def record_outcome(self, *, slug: str, outcome: records.Outcome) -> records.Outcome:
        """Write an outcome unless the worker reported one first (``HSETNX``); return the stored one."""
        return await self._write_once(self.key(slug, OUTCOMES), outcome.execution, outcome)

    async def read_outcome(self, *, slug: str, execution: str) -> records.Outcome | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, OUTCOMES), execution)
        return None if raw is None else records.load(records.Outcome, raw)

    # --- cleanup ----------------------------------------------------------------------------------

    async def pin_journal(self, *, slug: str, journal: records.Journal) -> records.Journal | records.Retained:
        """Create the journal entry once; return the stored entry, or the retained record when the
        execution is retained already (then no entry is created: see ``_PIN``)."""
        journal.version = 1
        with _translated():
            reply = await self.redis.eval(
                _PIN,
                2,
                self.key(slug, JOURNAL),
                self.key(slug, RETAINED),
                journal.execution,
                records.dump(journal),
            )
        kind = str(reply[0])
        if kind == "retained":
            return records.load(records.Retained, reply[1])
        if kind == "journal":
            return records.load(records.Journal, reply[1])
        return journal

    async def read_journal(self, *, slug: str, execution: str) -> records.Journal | None:
        with _translated():
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
        self, *, slug: str, retained: records.Retained, journal_version: int
    ) -> records.Retained:
        """Write the retained record, clear the journal entry and index the execution, atomically.

        The first retain wins: when the execution is retained already, nothing is written and
        the stored record is returned. A journal entry that changed since ``journal_version`` was
        read raises :class:`errors.StaleWrite`. One script (all keys in the swarm's slot), durable
        like the journal saves before it. The swarm is listed for the retention sweep first, so a
        retained record is never unlisted: in the same pipeline, ahead of the script, except on a
        cluster, where that list lives in another slot and is written on its own first.
        """
        listed: list[tuple[Any, ...]] = [("SADD", f"{self.prefix}:swarms", slug)]
        if isinstance(self.redis, redis.asyncio.cluster.RedisCluster):
            with _translated():
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
                    3,
                    self.key(slug, RETAINED),
                    self.key(slug, JOURNAL),
                    self._index(slug),
                    retained.execution,
                    raw,
                    self._clock(),
                    journal_version,
                ),
                ("HGET", self.key(slug, OWNERS), retained.execution),
            ],
            durable=True,
        )
        reply, owner = replies[-2], replies[-1] or ""
        if int(reply[0]) == 0:
            self._note("retained", slug=slug, execution=retained.execution, raw=str(reply[1]), owner=owner)
            return records.load(records.Retained, reply[1])
        if int(reply[0]) != 1:
            raise errors.StaleWrite(
                f"the cleanup-journal entry of {retained.execution} changed since this step read it; "
                "nothing was retained"
            )
        self._note("retained", slug=slug, execution=retained.execution, raw=raw, owner=owner)
        return retained

    async def clear_journal(self, *, slug: str, execution: str) -> bool:
        """Remove a journal entry left beside the execution's retained record; whether one was."""
        with _translated():
            removed = await self.redis.eval(
                _CLEAR_JOURNAL, 2, self.key(slug, JOURNAL), self.key(slug, RETAINED), execution
            )
        return bool(removed)

    # --- after a failover (see :mod:`failover`) -----------------------------------------------------

    def _note(self, kind: failover.Kind, *, slug: str, execution: str, raw: str, owner: str) -> None:
        if self.recent is not None:
            self.recent.note(kind=kind, slug=slug, execution=execution, raw=raw, owner=owner)

    async def primary_id(self) -> str | None:
        """The primary's replication id (a promoted replica, or a primary started again, has a new
        one); None when the server answering is not a primary. Raises :class:`errors.Unwatchable`
        on a cluster (each slot has its own primary) or a Redis that refuses ``INFO``."""
        if isinstance(self.redis, redis.asyncio.cluster.RedisCluster):
            raise errors.Unwatchable("a Redis Cluster: each slot has its own primary")
        try:
            with _translated():
                info = await self.redis.info("replication")
        except errors.StoreUnavailable as e:
            if isinstance(e.__cause__, redis.exceptions.ResponseError):
                raise errors.Unwatchable(f"INFO replication is refused: {e}") from e
            raise
        if info.get("role") != "master" or not info.get("master_replid"):
            return None
        return str(info["master_replid"])

    async def read_evidence(self, *, kind: failover.Kind, slug: str, execution: str) -> str | None:
        """One evidence record as stored (JSON), or None."""
        with _translated():
            raw = await self.redis.hget(self.key(slug, _EVIDENCE[kind]), execution)
        return None if raw is None else str(raw)

    async def replace_evidence(
        self,
        *,
        kind: failover.Kind,
        slug: str,
        execution: str,
        expected: str | None,
        new: str,
        owner: str,
    ) -> failover.Answer:
        """Write ``new`` if the stored record is still ``expected`` (None: none) and ``owner`` (the
        name's owner claim when it was written) is still the owner or was never forgotten, durably
        (``_RESTORE``): ``written``; ``changed`` when another write came first; ``retained`` for a
        journal entry of an execution that is retained; ``owner_changed`` or ``forgotten`` when
        the record's life is over (nothing is written then)."""
        listed: list[tuple[Any, ...]] = (
            [("SADD", f"{self.prefix}:swarms", slug)] if kind == "retained" else []
        )
        replies = await self._pipeline(
            slug=slug,
            commands=[
                *listed,
                (
                    "EVAL",
                    _RESTORE,
                    6,
                    self.key(slug, _EVIDENCE[kind]),
                    self.key(slug, RETAINED),
                    self.key(slug, JOURNAL),
                    self._index(slug),
                    self.key(slug, OWNERS),
                    self.key(slug, FORGOTTEN),
                    execution,
                    expected or "",
                    new,
                    self._clock(),
                    "1" if expected is None else "",
                    kind,
                    owner,
                ),
            ],
            durable=True,
        )
        answer = str(replies[-1])
        for known in _ANSWERS:
            if answer == known:
                return known
        raise errors.StoreUnavailable(f"Redis answered {answer!r} to a restore")

    # --- owners -----------------------------------------------------------------------------------

    async def owner(self, *, slug: str, execution: str) -> records.Owner | None:
        """The Execution that claimed ``execution``'s records, if one did."""
        with _translated():
            raw = await self.redis.hget(self.key(slug, OWNERS), execution)
        return None if raw is None else records.load(records.Owner, raw)

    async def claim(self, *, slug: str, execution: str, owner: records.Owner) -> records.Owner | None:
        """Claim an execution name's records for one Execution (by UID), once.

        Returns the owner: ``owner`` when claimed now or earlier by the same UID, another
        Execution's, or None when the name has records an older version wrote without an owner.
        """
        keys = [self.key(slug, OWNERS), self._index(slug)]
        keys += [self.key(slug, name) for name in LAUNCHED]
        with _translated():
            raw = await self.redis.eval(
                _CLAIM, len(keys), *keys, execution, records.dump(owner), self._clock()
            )
        if not raw:
            return None
        return records.load(records.Owner, raw)

    async def read_retained(self, *, slug: str, execution: str) -> records.Retained | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, RETAINED), execution)
        return None if raw is None else records.load(records.Retained, raw)

    # --- refusals by fingerprint ---------------------------------------------------------------

    async def note_refusal(
        self, *, slug: str, capture: records.StartupCapture, example: records.Example, at: str
    ) -> bool:
        """Count a refused Pod's capture under its fingerprint (once per Pod UID); whether it was new."""
        if not capture.fingerprint:
            return False
        summary = records.FingerprintSummary.model_validate(
            {
                "fingerprint": capture.fingerprint,
                "text": capture.fingerprint_text or "",
                "class": capture.failure_class,
                "count": 1,
                "first_seen": at,
                "last_seen": at,
                "example": example,
            }
        )
        with _translated():
            noted = await self.redis.eval(
                _NOTE_REFUSAL,
                3,
                self.key(slug, FINGERPRINTS),
                self.key(slug, FINGERPRINTS_SEEN),
                self.key(slug, REFUSALS),
                capture.fingerprint,
                int(self._clock()),
                at,
                f"{capture.fingerprint}|{example.uid}",
                records.dump(summary),
                MAX_FINGERPRINTS,
                REFUSALS_HORIZON_SECONDS,
                MAX_REFUSALS_KEPT,
            )
        return bool(noted)

    async def fingerprints(self, *, slug: str) -> list[records.FingerprintSummary]:
        """The swarm's fingerprints, the most counted first."""
        with _translated():
            found = await self.redis.hgetall(self.key(slug, FINGERPRINTS))
        summaries = [records.load(records.FingerprintSummary, raw) for raw in found.values()]
        return sorted(summaries, key=lambda s: (-s.count, s.last_seen))

    async def refusals_since(self, *, slug: str, seconds: float) -> int:
        """Refused Pods counted in the last ``seconds``."""
        with _translated():
            found = await self.redis.zcount(self.key(slug, REFUSALS), f"({self._clock() - seconds}", "+inf")
        return int(found)

    async def budget(
        self,
        *,
        slug: str,
        window_seconds: int,
        max_refusals: int,
        same_fingerprint: bool,
        template: str,
        reset: str,
        at: str,
    ) -> tuple[str, records.BudgetState | None]:
        """Evaluate a swarm's refusal budget (``_BUDGET``): ``('tripped', state)``, ``('cleared',
        the state it had)`` or ``('ok', None)``. The state lives in Redis: every replica agrees."""
        with _translated():
            reply = await self.redis.eval(
                _BUDGET,
                3,
                self.key(slug, REFUSALS),
                self.key(slug, BUDGET),
                self.key(slug, FINGERPRINTS),
                self._clock(),
                at,
                window_seconds,
                max_refusals,
                "1" if same_fingerprint else "",
                template,
                reset,
            )
        verdict = str(reply[0])
        state = records.load(records.BudgetState, reply[1]) if len(reply) > 1 else None
        return verdict, state

    # --- retention --------------------------------------------------------------------------------

    async def swarms(self) -> list[str]:
        """Every swarm that ever retained a record (``PREFIX:swarms``)."""
        with _translated():
            found = await self.redis.smembers(f"{self.prefix}:swarms")
        return sorted(str(slug) for slug in found)

    async def sweep(self, *, slug: str, retention_seconds: float, batch: int = SWEEP_BATCH) -> Swept:
        """Remove at most ``batch`` executions of ``slug`` whose last write is older than the retention."""
        now = self._clock()
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
        with _translated():
            removed, kept, _ = await self.redis.eval(
                _SWEEP,
                len(keys),
                *keys,
                now - retention_seconds,
                now,
                batch,
                TOMBSTONE_SECONDS,
                _TOMBSTONES_PRUNED,
            )
        return Swept(removed=int(removed), kept=int(kept))


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
