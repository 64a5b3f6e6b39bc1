"""The soak's Redis: a Sentinel set of three servers (a primary and two replicas, AOF with
``appendfsync always``) and three Sentinels, on loopback, from the test tooling's
:class:`~tests.support.redis_server.RedisServer` and :class:`~tests.support.redis_sentinel.Sentinel`.

The faults act on the servers' processes: ``kill -9`` of the primary (the Sentinels promote a
replica; the old primary is started again later from its AOF and the Sentinels make it a replica),
of a replica, and the primary killed and started again at once from its AOF (before the Sentinels
judge it down). Partitions between an operator and Redis are :mod:`tests.soak.redis_net`'s.

:meth:`SentinelSet.lose_writes` makes Redis lose acknowledged writes for real, as
``tests/integration/test_failover_restore.py`` does on a smaller set: each replica is pointed at the
primary through a relay of its own (:class:`~tests.support.redis_relay.Relay`; ``REPLICAOF`` to
the relay's port: a partial resync, the same stream), both relays stop forwarding (the replicas
still report their links up, so Sentinel will promote one of them), the writes of the next seconds
are acknowledged by the primary alone, and the primary is killed. Which fields the promoted replica
lacks is measured, not assumed: every evidence hash's field names are read on each server just
before the kill (the replicas can receive nothing more by then).

Each server has a config file, as a deployed one does: whom it replicates is written there (by
Sentinel's ``CONFIG REWRITE`` after a failover), not on its command line, so a server started
again comes back in the role the Sentinels last gave it.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.sentinel

from tests.soak.checker.observe import not_a_primary
from tests.support.redis_relay import Relay
from tests.support.redis_sentinel import MASTER, Sentinel
from tests.support.redis_server import RedisServer, RedisServerError

#: A Sentinel judges the primary down after this long without an answer. Longer than the
#: tooling's 1 s: the soak loads both CPUs, and a failover nobody injected is not in its ledger.
DOWN_AFTER_MS = 3000
#: Short, so that one failover may follow another within a run.
FAILOVER_TIMEOUT_MS = 10000
_AOF = ("--appendonly", "yes", "--appendfsync", "always")
#: How long a replica may take to replicate through its relay before the fault gives up (and puts
#: it back on the primary's own port).
RELINK_TIMEOUT = 30.0

Fields = dict[str, set[str]]
"""Hash key -> its field names."""


@dataclass
class Loss:
    """What :meth:`SentinelSet.lose_writes` did, and what the replicas lacked when the primary died."""

    primary: RedisServer
    """The killed primary (stopped)."""
    held: float
    """Seconds the links were held before the kill."""
    primary_fields: int
    """Fields of the evidence hashes the primary held just before the kill."""
    behind: dict[int, int] = field(default_factory=dict)
    """Replica port -> bytes of replication stream it lacked at the kill."""
    missing: dict[int, Fields] = field(default_factory=dict)
    """Replica port -> the fields the primary held and it lacked at the kill."""
    promoted: int | None = None
    killed_at: float = 0.0
    """``time.monotonic()`` just after the kill."""
    prepared: float = 0.0
    """Seconds from the call to the hold: forgets under way ended, replicas moved onto relays."""

    def lost(self) -> Fields:
        """What the promoted replica lacked: writes the primary acknowledged, gone from Redis."""
        return self.missing.get(self.promoted or 0, {})

    def count(self) -> int:
        return sum(len(fields) for fields in self.lost().values())

    def by_hash(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for key, fields in self.lost().items():
            name = key.rpartition("}:")[2] or key
            counted[name] = counted.get(name, 0) + len(fields)
        return dict(sorted(counted.items()))


class Gate:
    """Keeps a person's writes (the workload's ``records forget``) out of a span in which Redis
    itself may lose them: :meth:`lose_writes` closes it and waits for the ones under way before it
    holds the links, and opens it again once the primary is killed; a ``redis-primary-kill`` while
    the primary acknowledges writes alone (``REDIS_MIN_REPLICAS=0``) closes it from before the kill
    until the old primary, started again, answers as a replica (until then it takes writes as a
    primary of its own, and loses them when the Sentinels convert it)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._inside = 0
        self._closed = False

    def enter(self) -> bool:
        """Whether a write may start now (then :meth:`leave` when it is done)."""
        with self._changed:
            if self._closed:
                return False
            self._inside += 1
            return True

    def leave(self) -> None:
        with self._changed:
            self._inside -= 1
            self._changed.notify_all()

    def close(self, *, timeout: float) -> None:
        with self._changed:
            self._closed = True
            if not self._changed.wait_for(lambda: self._inside == 0, timeout=timeout):
                raise RedisServerError(
                    f"{self._inside} writes of the workload still under way after {timeout}s"
                )

    def open(self) -> None:
        with self._changed:
            self._closed = False


#: How long a hold waits for the workload's forgets under way (each runs a Python process).
GATE_TIMEOUT = 90.0


class SentinelSet:
    def __init__(self) -> None:
        self.servers: list[RedisServer] = []
        self.sentinels: list[Sentinel] = []
        self._configs = tempfile.TemporaryDirectory(prefix="soak-redis-conf-")
        #: Set while :meth:`lose_writes` holds the replicas' links (until the primary is killed).
        self.holding = threading.Event()
        #: How many holds :meth:`lose_writes` has ended (its primary killed, or given up).
        self.holds_done = 0
        #: Closed by :meth:`lose_writes` from before it holds the links until the kill.
        self.gate = Gate()

    def _server(self, index: int, *, config: str) -> RedisServer:
        path = Path(self._configs.name) / f"server-{index}.conf"
        path.write_text(config)
        server = RedisServer(extra_args=_AOF, config_file=path)
        server.start()
        self.servers.append(server)
        return server

    def start(self) -> SentinelSet:
        try:
            first = self._server(0, config="")
            for index in (1, 2):
                self._server(index, config=f"replicaof 127.0.0.1 {first.port}\n")
            for _ in range(3):
                sentinel = Sentinel(
                    primary_port=first.port,
                    down_after_ms=DOWN_AFTER_MS,
                    failover_timeout_ms=FAILOVER_TIMEOUT_MS,
                )
                self.sentinels.append(sentinel)
                sentinel.start()
            self.wait_settled(timeout=60)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()
        for server in self.servers:
            server.close()
        self.sentinels, self.servers = [], []
        self._configs.cleanup()

    def __enter__(self) -> SentinelSet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- addresses ----------------------------------------------------------------------------

    @property
    def server_ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def sentinel_ports(self) -> list[int]:
        return [sentinel.port for sentinel in self.sentinels]

    @property
    def addresses(self) -> str:
        """``AGENTIHOOKS_SWARM_REDIS_SENTINELS`` naming the real Sentinels (the soak's own reads)."""
        return ",".join(f"{s.host}:{s.port}" for s in self.sentinels)

    def primary_port(self) -> int | None:
        """The primary's port as the Sentinels name it (the one most of them name), if any answers."""
        named: list[int] = []
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.exceptions.RedisError):
                found: Any = sentinel.client().sentinel_get_master_addr_by_name(MASTER)
                if found:
                    named.append(int(found[1]))
        return max(set(named), key=named.count) if named else None

    def primary(self) -> RedisServer | None:
        port = self.primary_port()
        return next((s for s in self.servers if s.port == port), None)

    def replicas(self) -> list[RedisServer]:
        primary = self.primary()
        return [s for s in self.servers if s is not primary]

    def agreed_primary(self, *, timeout: float = 2.0) -> redis.Redis:
        """A client of the primary most Sentinels name, once that server answers as a primary with
        a replica in sync; else ``redis.exceptions.ConnectionError`` (ask again later).

        Not :meth:`client`'s redis-py Sentinel client: it reads from the primary the first
        Sentinel to answer names. A primary killed and started again after its failover comes back
        as a primary of its own, with what its AOF held, until the Sentinels make it a replica
        some seconds later; a read there misses what the real primary holds.
        """
        port = self.primary_port()
        if port is None:
            raise redis.exceptions.ConnectionError(f"no Sentinel names a primary: {self.describe()}")
        client = redis.Redis(
            port=port, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
        )
        try:
            found = not_a_primary(client.execute_command("ROLE"))  # type: ignore[no-untyped-call,unused-ignore]
        except BaseException:
            client.close()
            raise
        if found:
            client.close()
            raise redis.exceptions.ConnectionError(f"port {port}, which most Sentinels name, is {found}")
        return client

    def client(self, *, timeout: float = 2.0) -> redis.Redis:
        """A client of the current primary, found through the Sentinels (as the operator finds it)."""
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
            [(s.host, s.port) for s in self.sentinels], sentinel_kwargs={"socket_timeout": timeout}
        )
        primary: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
            MASTER, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
        )
        return primary

    # -- health -------------------------------------------------------------------------------

    def wait_settled(self, *, timeout: float, replicas: int = 2) -> None:
        """Wait until every server runs and the Sentinels name a primary that answers as one,
        with ``replicas`` replicas in sync (:meth:`settled`). A Redis fault returns once one is
        (``REDIS_MIN_REPLICAS=1`` can be met): a returning old primary is made a replica by the
        Sentinels some seconds later (they wait 8 s before they convert it), meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.settled(replicas=replicas):
                return
            time.sleep(0.2)
        raise RedisServerError(f"the Sentinel set did not settle within {timeout}s: {self.describe()}")

    def settled(self, *, replicas: int = 2) -> bool:
        """Every server runs, and the primary the Sentinels name has ``replicas`` replicas in
        sync: ``online``, the ones a ``WAIT`` counts and a failover can promote with everything
        the primary acknowledged. A replica still loading the primary's data is linked (counted
        in ``connected_slaves``) but holds its old data until it is done."""
        primary = self.primary()
        if primary is None or not all(s.running for s in self.servers):
            return False
        try:
            info = redis.Redis(port=primary.port, socket_timeout=2).info("replication")
        except redis.exceptions.RedisError:
            return False
        return info.get("role") == "master" and len(_online(info)) >= replicas

    # -- lost writes --------------------------------------------------------------------------

    def lose_writes(self, *, hold: float, pattern: str) -> Loss:
        """Hold every replica's link for ``hold`` seconds, read which fields of the hashes matching
        ``pattern`` each server holds, and ``kill -9`` the primary (see the module docstring).

        Returns at once after the kill (:meth:`wait_promoted` follows the Sentinels). If the links
        cannot be moved onto the relays, the replicas are put back on the primary and nothing is
        killed (``RedisServerError``).
        """
        primary = self.primary()
        if primary is None or not primary.running:
            raise RedisServerError(f"no running primary: {self.describe()}")
        replicas = [s for s in self.servers if s is not primary]
        relays: list[Relay] = []
        killed = False
        called = time.monotonic()
        try:
            self.gate.close(timeout=GATE_TIMEOUT)
            for replica in replicas:
                relay = Relay(upstream_port=primary.port)
                relay.start()
                relays.append(relay)
                _replicaof(replica, relay.port)
            through = {r.port: relay.port for r, relay in zip(replicas, relays, strict=True)}
            self._wait_linked(primary, through)
            self.holding.set()
            for relay in relays:
                relay.hold()
            began = time.monotonic()
            prepared = began - called
            time.sleep(hold)
            # The replicas first: they can receive nothing more. The primary last, just before its
            # kill (what it acknowledges in between is lost too, and not counted).
            behind = {r.port: _offset(r, "slave_repl_offset") for r in replicas}
            theirs = {r.port: _fields(r, pattern) for r in replicas}
            mine = _fields(primary, pattern)
            ahead = _offset(primary, "master_repl_offset")
            primary.kill()
            killed_at = time.monotonic()
            killed = True
            held = killed_at - began
        finally:
            if self.holding.is_set():
                self.holds_done += 1
            self.holding.clear()
            self.gate.open()
            for relay in relays:  # Closed, never released: nothing held reaches a replica.
                relay.close()
            if not killed:
                for replica in replicas:
                    with contextlib.suppress(redis.exceptions.RedisError, RedisServerError):
                        _replicaof(replica, primary.port)
        return Loss(
            primary=primary,
            held=held,
            primary_fields=sum(len(f) for f in mine.values()),
            behind={port: max(ahead - offset, 0) for port, offset in behind.items()},
            missing={port: _minus(mine, fields) for port, fields in theirs.items()},
            killed_at=killed_at,
            prepared=prepared,
        )

    def _wait_linked(self, primary: RedisServer, relays: Mapping[int, int]) -> None:
        """Until each replica replicates through its relay (``relays``: replica port -> relay
        port), up to date with the primary."""
        deadline = time.monotonic() + RELINK_TIMEOUT
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError, KeyError, ValueError):
                ahead = _offset(primary, "master_repl_offset")
                linked = 0
                for port, relay in relays.items():
                    info = redis.Redis(port=port, socket_timeout=2).info("replication")
                    if (
                        int(info.get("master_port", 0)) == relay
                        and info.get("master_link_status") == "up"
                        and int(info["slave_repl_offset"]) >= ahead
                    ):
                        linked += 1
                if linked == len(relays):
                    return
            time.sleep(0.1)
        raise RedisServerError(
            f"the replicas did not replicate through their relays within {RELINK_TIMEOUT}s: {self.describe()}"
        )

    def wait_replicated(self, primary: RedisServer, *, timeout: float = 10.0) -> None:
        """Until every replica linked to ``primary`` has what it holds now (its replication offset
        at the call): a write it acknowledged alone before then is on the replicas too. With no
        replica in sync there is nothing to wait for (and no replica to promote either)."""
        ahead = _offset(primary, "master_repl_offset")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError, KeyError, ValueError):
                info = redis.Redis(port=primary.port, socket_timeout=2).info("replication")
                if min((int(replica["offset"]) for replica in _online(info)), default=ahead) >= ahead:
                    return
            time.sleep(0.05)
        raise RedisServerError(
            f"the replicas did not reach offset {ahead} within {timeout}s: {self.describe()}"
        )

    def wait_promoted(self, *, old: RedisServer, timeout: float = 60.0) -> int:
        """The port of the replica the Sentinels promote in ``old``'s place, once most of them
        name it and it answers as a primary."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port is not None and port != old.port and _role(port) == "master":
                return port
            time.sleep(0.1)
        raise RedisServerError(f"the Sentinels promoted no replica within {timeout}s: {self.describe()}")

    def wait_replica(self, server: RedisServer, *, timeout: float = 60.0) -> None:
        """Wait until ``server`` answers as a replica: an old primary started again after its
        failover answers writes as a primary of its own until the Sentinels convert it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _role(server.port) == "slave":
                return
            time.sleep(0.1)
        raise RedisServerError(f"{server.port} was not made a replica within {timeout}s: {self.describe()}")

    def present(self, fields: Fields) -> int:
        """How many of ``fields`` the primary the Sentinels agree on holds now."""
        if not fields:
            return 0
        client = self.agreed_primary(timeout=5)
        try:
            pipe = client.pipeline(transaction=False)
            for key, names in fields.items():
                for name in names:
                    pipe.hexists(key, name)
            return sum(1 for found in pipe.execute() if found)
        finally:
            client.close()

    def describe(self) -> str:
        parts = []
        for server in self.servers:
            role = (_role(server.port, timeout=1.0) if server.running else None) or "down"
            parts.append(f"{server.port}:{role}")
        return f"servers {', '.join(parts)}; Sentinels name {self.primary_port()}"


def _role(port: int, *, timeout: float = 2.0) -> str | None:
    """The replication role the server on ``port`` answers with (``master``, ``slave``), or None
    when it does not answer."""
    with contextlib.suppress(redis.exceptions.RedisError):
        return str(redis.Redis(port=port, socket_timeout=timeout).info("replication").get("role"))
    return None


def _online(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The replicas in sync in a primary's ``INFO replication`` (``slaveN`` entries ``online``)."""
    return [
        value
        for name, value in info.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    ]


def _replicaof(server: RedisServer, port: int) -> None:
    client = redis.Redis(port=server.port, socket_timeout=5)
    try:
        client.execute_command("REPLICAOF", "127.0.0.1", str(port))  # type: ignore[no-untyped-call,unused-ignore]
    finally:
        client.close()


def _offset(server: RedisServer, name: str) -> int:
    client = redis.Redis(port=server.port, socket_timeout=5)
    try:
        return int(client.info("replication")[name])
    finally:
        client.close()


def _fields(server: RedisServer, pattern: str) -> Fields:
    """The field names of every hash matching ``pattern`` on ``server`` (a replica answers reads)."""
    client = redis.Redis(port=server.port, socket_timeout=10, decode_responses=True)
    try:
        return {
            str(key): {str(f) for f in client.hkeys(key)}
            for key in client.scan_iter(match=pattern, count=1000, _type="HASH")
        }
    finally:
        client.close()


def _minus(mine: Fields, theirs: Fields) -> Fields:
    return {key: missing for key, fields in mine.items() if (missing := fields - theirs.get(key, set()))}
