"""The soak's Redis: a Sentinel set of three servers (a primary and two replicas, AOF with
``appendfsync always``) and three Sentinels, on loopback, from the test tooling's
:class:`~tests.support.redis_server.RedisServer` and :class:`~tests.support.redis_sentinel.Sentinel`.

The faults act on the servers' processes: ``kill -9`` of the primary (the Sentinels promote a
replica; the old primary is started again later from its AOF and the Sentinels make it a replica),
of a replica, and the primary killed and started again at once from its AOF (before the Sentinels
judge it down). Partitions between an operator and Redis are :mod:`tests.soak.redis_net`'s.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis
import redis.sentinel

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

    def start(self) -> SentinelSet:
        try:
            first = RedisServer(extra_args=_AOF)
            first.start()
            self.servers.append(first)
            for _ in range(2):
                replica = RedisServer(extra_args=(*_AOF, "--replicaof", "127.0.0.1", str(first.port)))
                replica.start()
                self.servers.append(replica)
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

    def client(self, *, timeout: float = 2.0) -> redis.Redis:
        """A client of the current primary, found through the Sentinels (as the operator finds it)."""
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            [(s.host, s.port) for s in self.sentinels], sentinel_kwargs={"socket_timeout": timeout}
        )
        primary: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            MASTER, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
        )
        return primary

    # -- health -------------------------------------------------------------------------------

    def wait_settled(self, *, timeout: float) -> None:
        """Wait until every server runs, the Sentinels agree on a primary that answers as one,
        and both replicas are linked to it: the state each Redis fault starts from and returns to."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.settled():
                return
            time.sleep(0.2)
        raise RedisServerError(f"the Sentinel set did not settle within {timeout}s: {self.describe()}")

    def settled(self) -> bool:
        primary = self.primary()
        if primary is None or not all(s.running for s in self.servers):
            return False
        try:
            info = redis.Redis(port=primary.port, socket_timeout=2).info("replication")
        except redis.exceptions.RedisError:
            return False
        return info.get("role") == "master" and int(info.get("connected_slaves", 0)) >= len(self.servers) - 1

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
