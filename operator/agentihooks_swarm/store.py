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
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final, TypeVar

import redis
import redis.asyncio
import redis.exceptions

from agentihooks_swarm import errors, records, settings as settings_

_Record = TypeVar("_Record", records.FinalRecord, records.Outcome, records.Journal)

STARTUP_DIAGNOSTICS: Final = "attempt-startup-diagnostics"
HANDS: Final = "attempt-hands"
FINALS: Final = "attempt-finals"
HEARTBEATS: Final = "attempt-heartbeats"
OUTCOMES: Final = "attempt-outcomes"
JOURNAL: Final = "cleanup-journal"
RETAINED: Final = "attempt-retained"


def key(prefix: str, slug: str, name: str) -> str:
    """The Redis key of hash ``name`` of swarm ``slug``."""
    return f"{prefix}:{{{slug}}}:{name}"


def _client_options(settings: settings_.Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": settings.redis_timeout_seconds,
        "socket_connect_timeout": settings.redis_timeout_seconds,
        "health_check_interval": 30,
    }
    if settings.redis_password is not None:
        options["password"] = settings.redis_password
    if settings.redis_ca_file is not None:
        options["ssl_ca_certs"] = settings.redis_ca_file
    return options


class Store:
    """Synchronous access for people and scripts; see the module docstring."""

    def __init__(self, *, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix

    def key(self, slug: str, name: str) -> str:
        return key(self.prefix, slug, name)


def connect(settings: settings_.Settings | None = None) -> Store:
    """Connect as the controller does, from its ``AGENTIHOOKS_SWARM_*`` environment."""
    settings = settings_.Settings.from_env() if settings is None else settings
    client = redis.Redis.from_url(settings.redis_url, **_client_options(settings))
    return Store(client=client, prefix=settings.key_prefix)


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


class AsyncStore:
    """The operator's Redis operations. Every method is one round trip (or one transaction)."""

    def __init__(self, *, client: redis.asyncio.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix

    def key(self, slug: str, name: str) -> str:
        return key(self.prefix, slug, name)

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

    async def record_startup(self, *, slug: str, execution: str, record: records.StartupRecord) -> bool:
        """``HSETNX`` a launch capture: True if stored now, False if an earlier capture is kept."""
        with _translated():
            written = await self.redis.hsetnx(
                self.key(slug, STARTUP_DIAGNOSTICS), execution, records.dump(record)
            )
        return bool(written)

    async def read_startup(self, *, slug: str, execution: str) -> records.StartupRecord | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, STARTUP_DIAGNOSTICS), execution)
        return None if raw is None else records.load(records.StartupRecord, raw)

    async def save_hand(self, *, slug: str, execution: str, hand: records.HandResult) -> None:
        with _translated():
            await self.redis.hset(self.key(slug, HANDS), execution, records.dump(hand))

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

    async def pin_journal(self, *, slug: str, journal: records.Journal) -> records.Journal:
        """Create the journal entry once (``HSETNX``); return the stored one."""
        return await self._write_once(self.key(slug, JOURNAL), journal.execution, journal)

    async def read_journal(self, *, slug: str, execution: str) -> records.Journal | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, JOURNAL), execution)
        return None if raw is None else records.load(records.Journal, raw)

    async def save_journal(self, *, slug: str, journal: records.Journal) -> None:
        with _translated():
            await self.redis.hset(self.key(slug, JOURNAL), journal.execution, records.dump(journal))

    async def retain(self, *, slug: str, retained: records.Retained) -> None:
        """Write the retained record and clear the journal entry in one ``MULTI``/``EXEC``."""
        with _translated():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(self.key(slug, RETAINED), retained.execution, records.dump(retained))
                pipe.hdel(self.key(slug, JOURNAL), retained.execution)
                await pipe.execute()

    async def read_retained(self, *, slug: str, execution: str) -> records.Retained | None:
        with _translated():
            raw = await self.redis.hget(self.key(slug, RETAINED), execution)
        return None if raw is None else records.load(records.Retained, raw)


@contextlib.asynccontextmanager
async def open_store(settings: settings_.Settings) -> AsyncIterator[AsyncStore]:
    """The operator's store for the lifetime of the ``async with`` block."""
    client = redis.asyncio.Redis.from_url(settings.redis_url, **_client_options(settings))
    store = AsyncStore(client=client, prefix=settings.key_prefix)
    try:
        yield store
    finally:
        await store.aclose()
