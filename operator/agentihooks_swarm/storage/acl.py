"""The workers' Redis users: one ACL user per swarm that can write its own swarm's heartbeats and
outcomes, and nothing else.

A worker reports two things (:mod:`agentihooks_swarm.worker.reports`): its heartbeat, an ``EVAL``
of a script that runs ``HGET`` then ``HSET`` on ``PREFIX:{SLUG}:attempt-heartbeats``, and its
outcome, an ``HSETNX`` on ``PREFIX:{SLUG}:attempt-outcomes``. So its user gets exactly those
commands (Redis checks the commands a script runs against the user too), read and write on the
heartbeats hash (``EVAL`` declares its keys read-write, and the script reads the earlier
heartbeat), write only on the outcomes hash (``HSETNX`` inserts without reading), no channels, and
nothing else: no other key, no ``KEYS``, ``CONFIG`` or ``FLUSHALL``. What redis-py sends on
connect besides ``AUTH``/``HELLO`` (``CLIENT SETINFO``) is refused and redis-py ignores the refusal.
A worker on a Redis Cluster also reads the slot map (``CLUSTER SLOTS``/``SHARDS``) and the command
table (``COMMAND``), which is how redis-py's cluster client finds a key's node.

Users are per server and not replicated (on a Redis Cluster each node, replicas too, is told;
redis-py's cluster client knows only the primaries, so the replicas come from ``CLUSTER NODES``),
and a server started without an ``aclfile`` has lost them: :mod:`agentihooks_swarm.swarm.credentials`
makes them again on every pass and after a new primary. ``ACL SETUSER ... reset`` makes each call
state the whole user, so it is idempotent; connections already authenticated stay open. Passwords
travel as SHA-256 hashes (``#<hex>``): the operator keeps a replaced password only as its hash,
during the rotation's overlap.

The records reader (the chart's ``RELEASE-records`` Pod, docs/security.md) has a user of its own,
made the same way from the password the chart gives the controller: it may run the commands the
``records`` views send (``HGET``, ``HGETALL``, and ``PING`` for redis-py's health check) on the
operator's keys (``PREFIX:*``) and read nothing else, write nothing, and run no ``KEYS``, ``SCAN``,
``CONFIG``, ``FLUSHALL`` or script.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from typing import Final

import redis.asyncio.cluster
import redis.exceptions

from agentihooks_swarm import errors
from agentihooks_swarm.storage import connection
from agentihooks_swarm.storage.keys import HEARTBEATS, OUTCOMES, key

#: The heartbeat (``EVAL``, and the script's ``HGET`` and ``HSET``) and the outcome (``HSETNX``).
COMMANDS: Final = ("eval", "hget", "hset", "hsetnx")
#: What redis-py's cluster client asks before its first command: the slot map and the key positions.
CLUSTER_COMMANDS: Final = ("cluster|slots", "cluster|shards", "command")
#: What the records views send: one record (``HGET``), a swarm's fingerprints (``HGETALL``), and
#: redis-py's health check on a connection idle for a while (``PING``).
READER_COMMANDS: Final = ("hget", "hgetall", "ping")
#: The answers of a Redis that will not let the operator make users: no permission, or no ACL.
_REFUSALS: Final = ("NOPERM", "unknown command", "unknown subcommand", "ERR unknown")
#: Characters a key pattern treats as a glob.
_GLOB = re.compile(r"([*?\[\]\\])")


def username(*, prefix: str, slug: str) -> str:
    """The Redis user of swarm ``slug``'s workers."""
    return f"{prefix}-worker-{slug}"


def reader_username(*, prefix: str) -> str:
    """The Redis user of the records reader."""
    return f"{prefix}-records"


def digest(password: str) -> str:
    """A password as ``ACL SETUSER`` takes it hashed (``#<this>``) and ``ACL GETUSER`` shows it."""
    return hashlib.sha256(password.encode()).hexdigest()


def rules(*, prefix: str, slug: str, digests: Sequence[str], cluster: bool = False) -> list[str]:
    """The whole user, for ``ACL SETUSER``: its passwords (by digest), its commands, its two keys."""
    if not digests:
        raise ValueError("a worker user needs at least one password")
    commands = (*COMMANDS, *(CLUSTER_COMMANDS if cluster else ()))
    return [
        "reset",
        "on",
        *(f"#{d}" for d in digests),
        "resetchannels",
        "-@all",
        *(f"+{c}" for c in commands),
        f"%RW~{_pattern(key(prefix, slug, HEARTBEATS))}",
        f"%W~{_pattern(key(prefix, slug, OUTCOMES))}",
    ]


def reader_rules(*, prefix: str, digests: Sequence[str], cluster: bool = False) -> list[str]:
    """The whole reader user, for ``ACL SETUSER``: read-only, and only the operator's keys."""
    if not digests:
        raise ValueError("the reader user needs at least one password")
    commands = (*READER_COMMANDS, *(CLUSTER_COMMANDS if cluster else ()))
    return [
        "reset",
        "on",
        *(f"#{d}" for d in digests),
        "resetchannels",
        "-@all",
        *(f"+{c}" for c in commands),
        f"%R~{_pattern(prefix)}:*",
    ]


def _pattern(name: str) -> str:
    """A key pattern that matches exactly ``name`` (a prefix may hold a glob character)."""
    return _GLOB.sub(r"\\\1", name)


def replicas(listing: str) -> list[tuple[str, int]]:
    """The replicas ``CLUSTER NODES`` lists (host, port), but those it marks failed or without an
    address."""
    found: list[tuple[str, int]] = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        flags = set(fields[2].split(","))
        if not flags & {"slave", "replica"} or flags & {"fail", "noaddr", "handshake"}:
            continue
        host, _, port = fields[1].split("@")[0].split(",")[0].rpartition(":")
        if host and port.isdigit():
            found.append((host.strip("[]"), int(port)))
    return found


def refused(e: redis.exceptions.RedisError) -> bool:
    """Whether Redis refused user management itself (as opposed to being unreachable)."""
    if isinstance(e, redis.exceptions.NoPermissionError):
        return True
    return isinstance(e, redis.exceptions.ResponseError) and any(r in str(e) for r in _REFUSALS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerUsers:
    """The workers' users, on the operator's own connection (on a cluster: on every node)."""

    connection: connection.Connection

    async def ensure(self, *, slug: str, digests: Sequence[str]) -> None:
        """Make (or make again) swarm ``slug``'s worker user with exactly these passwords.

        Raises :class:`errors.AclRefused` when Redis will not manage users, and
        :class:`errors.StoreUnavailable` when it cannot be reached.
        """
        client = self.connection.redis
        cluster = isinstance(client, redis.asyncio.cluster.RedisCluster)
        command = (
            "ACL",
            "SETUSER",
            username(prefix=self.connection.prefix, slug=slug),
            *rules(prefix=self.connection.prefix, slug=slug, digests=digests, cluster=cluster),
        )
        await self._send(command, cluster=cluster)

    async def ensure_reader(self, *, digests: Sequence[str]) -> None:
        """Make (or make again) the records reader's user with exactly these passwords; raises as
        :meth:`ensure` does."""
        client = self.connection.redis
        cluster = isinstance(client, redis.asyncio.cluster.RedisCluster)
        command = (
            "ACL",
            "SETUSER",
            reader_username(prefix=self.connection.prefix),
            *reader_rules(prefix=self.connection.prefix, digests=digests, cluster=cluster),
        )
        await self._send(command, cluster=cluster)

    async def drop(self, *, slug: str) -> None:
        """Remove swarm ``slug``'s worker user (its Swarm is gone)."""
        client = self.connection.redis
        cluster = isinstance(client, redis.asyncio.cluster.RedisCluster)
        await self._send(
            ("ACL", "DELUSER", username(prefix=self.connection.prefix, slug=slug)), cluster=cluster
        )

    async def _send(self, command: tuple[str, ...], *, cluster: bool) -> None:
        client = self.connection.redis
        try:
            if cluster:
                assert isinstance(client, redis.asyncio.cluster.RedisCluster)
                await _every_node(client, command)
            else:
                await client.execute_command(*command)
        except redis.exceptions.RedisError as e:
            if refused(e):
                raise errors.AclRefused(
                    f"Redis refused {command[0]} {command[1]}: {type(e).__name__}: {errors.trim(str(e))}"
                ) from e
            with connection.translated():
                raise


async def _every_node(client: redis.asyncio.cluster.RedisCluster, command: tuple[str, ...]) -> None:
    """``command`` on every node of the cluster: users are per node, and a replica a failover
    promotes must have them too. redis-py sends ACL commands to one node unless told, and knows
    only the primaries."""
    everywhere = redis.asyncio.cluster.RedisCluster
    await client.execute_command(*command, target_nodes=everywhere.ALL_NODES)
    listing = await client.execute_command("CLUSTER", "NODES", target_nodes=everywhere.RANDOM)
    primary = client.get_primaries()[0]
    options = {k: v for k, v in primary.connection_kwargs.items() if k not in ("host", "port")}
    for host, port in replicas(str(listing)):
        node = redis.asyncio.cluster.ClusterNode(
            host, port, "replica", connection_class=primary.connection_class, **options
        )
        try:
            await node.execute_command(*command)
        finally:
            await node.disconnect()
