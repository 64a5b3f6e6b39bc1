"""The soak's Redis: a Sentinel set of three servers (a primary and two replicas, AOF with
``appendfsync always``) and three Sentinels, on loopback, from the test tooling's
:class:`~tests.support.redis_server.RedisServer` and :class:`~tests.support.redis_sentinel.Sentinel`.

The faults act on the servers' processes: ``kill -9`` of the primary (the Sentinels promote a
replica; the old primary is started again later from its AOF and the Sentinels make it a replica),
of a replica, and the primary killed and started again at once from its AOF (before the Sentinels
judge it down). Partitions between an operator and Redis are :mod:`tests.soak.redis_net`'s.

Each server has a config file, as a deployed one does: whom it replicates is written there (by
Sentinel's ``CONFIG REWRITE`` after a failover), not on its command line, so a server started
again comes back in the role the Sentinels last gave it.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import redis.sentinel

from tests.soak.checker.observe import not_a_primary
from tests.support.redis_sentinel import MASTER, Sentinel
from tests.support.redis_server import RedisServer, RedisServerError

#: A Sentinel judges the primary down after this long without an answer. Longer than the
#: tooling's 1 s: the soak loads both CPUs, and a failover nobody injected is not in its ledger.
DOWN_AFTER_MS = 3000
#: Short, so that one failover may follow another within a run.
FAILOVER_TIMEOUT_MS = 10000
_AOF = ("--appendonly", "yes", "--appendfsync", "always")


class SentinelSet:
    def __init__(self) -> None:
        self.servers: list[RedisServer] = []
        self.sentinels: list[Sentinel] = []
        self._configs = tempfile.TemporaryDirectory(prefix="soak-redis-conf-")

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
        online = [
            value
            for name, value in info.items()
            if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
        ]
        return info.get("role") == "master" and len(online) >= replicas

    def describe(self) -> str:
        parts = []
        for server in self.servers:
            role = "down"
            if server.running:
                with contextlib.suppress(redis.exceptions.RedisError):
                    role = str(
                        redis.Redis(port=server.port, socket_timeout=1).info("replication").get("role")
                    )
            parts.append(f"{server.port}:{role}")
        return f"servers {', '.join(parts)}; Sentinels name {self.primary_port()}"
