"""Redis, as people read it: the spec's read commands.

``store = connect(); store.redis.hget(store.key(slug, name), execution)`` prints a stored record
as JSON text. :func:`connect` connects as the controller does, from its ``AGENTIHOOKS_SWARM_*``
environment, to a single server, a Sentinel-managed primary or a Redis Cluster, and gives a
synchronous :class:`Store`; the hash names (``STARTUP_DIAGNOSTICS`` = ``attempt-startup-diagnostics``,
…) are here too. Where they live and why: :mod:`agentihooks_swarm.storage.keys`; the operator's own
operations: :mod:`agentihooks_swarm.storage.operations`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import redis.cluster

from agentihooks_swarm import errors, settings as settings_
from agentihooks_swarm.storage import scripts, topology
from agentihooks_swarm.storage.keys import (
    BUDGET,
    FINALS,
    FINGERPRINTS,
    FINGERPRINTS_SEEN,
    FORGOTTEN,
    FORGOTTEN_INDEX,
    HANDS,
    HEARTBEATS,
    JOURNAL,
    NAMESPACE,
    OUTCOMES,
    OWNED,
    OWNERS,
    RECORDS,
    REFUSALS,
    RETAINED,
    RETENTION_INDEX,
    STARTUP_DIAGNOSTICS,
    TOMBSTONE_SECONDS,
    TOMBSTONES_PRUNED,
    Durability,
    key,
)

__all__ = [
    "BUDGET",
    "FINALS",
    "FINGERPRINTS",
    "FINGERPRINTS_SEEN",
    "FORGOTTEN",
    "FORGOTTEN_INDEX",
    "HANDS",
    "HEARTBEATS",
    "JOURNAL",
    "OUTCOMES",
    "OWNERS",
    "RECORDS",
    "REFUSALS",
    "RETAINED",
    "RETENTION_INDEX",
    "STARTUP_DIAGNOSTICS",
    "Store",
    "connect",
    "key",
]

_FORGET: Final = scripts.load("forget")
_RELEASE: Final = scripts.load("release_slug")


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
            TOMBSTONES_PRUNED,
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

    def slug_owner(self, *, slug: str) -> str | None:
        """The namespace whose swarm owns ``slug`` (its records are that namespace's), or None."""
        owner = self.redis.get(self.key(slug, NAMESPACE))
        return None if owner is None else str(owner)

    def release(self, *, slug: str, namespace: str) -> None:
        """Give ``slug`` up so that a Swarm of that name in another namespace may use it: only by
        its owner, and only once none of its records and refusals is left (:class:`errors.SlugHeld`
        says which is)."""
        keys = [self.key(slug, NAMESPACE), *(self.key(slug, name) for name in OWNED)]
        answer = int(self.redis.eval(_RELEASE, len(keys), *keys, namespace))
        if answer == 0:
            raise errors.SlugHeld(f"swarm name {slug!r} is not owned by namespace {namespace!r}")
        if answer < 0:
            raise errors.SlugHeld(
                f"swarm name {slug!r} still has records in {self.key(slug, OWNED[-answer - 1])}: forget "
                "them (records forget) or let retention remove them, then release it"
            )


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
