"""A Sentinel-managed Redis on loopback: a primary, one replica and three ``redis-sentinel``.

The replica replicates through a :class:`~tests.support.redis_relay.Relay`, so a test can hold
its link back. Sentinels decide quickly (down after 1 s), so a ``kill -9`` of the primary is
followed by the replica's promotion within a few seconds. Everything lives in temporary
directories and is stopped by :meth:`SentinelTopology.close` (and at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from agentihooks_swarm import settings as settings_
from tests.support.redis_relay import Relay
from tests.support.redis_server import RedisServer, RedisServerError, free_port

MASTER = "mymaster"
DOWN_AFTER_MS = 1000
#: Longer than a Sentinel election may take (Sentinel gives one up after 10 s).
ELECTION_S = 12.0


class Sentinel:
    """One ``redis-sentinel`` process with its own writable config file."""

    def __init__(
        self,
        *,
        primary_port: int,
        host: str = "127.0.0.1",
        down_after_ms: int = DOWN_AFTER_MS,
        failover_timeout_ms: int = 180000,
    ) -> None:
        self.host = host
        self.port = free_port(host=host)
        self._primary_port = primary_port
        self._down_after_ms = down_after_ms
        self._failover_timeout_ms = failover_timeout_ms
        self._dir = tempfile.TemporaryDirectory(prefix="redis-sentinel-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        directory = Path(self._dir.name)
        config = directory / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind {self.host}\ndaemonize no\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER} {self.host} {self._primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {self._down_after_ms}\n"
            # Long by default, so Sentinel does not "fix" the replica's master address (the relay)
            # back to the primary's during a test (+fix-slave-config waits this long).
            f"sentinel failover-timeout {MASTER} {self._failover_timeout_ms}\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        binary = shutil.which("redis-sentinel")
        if binary is None:
            raise RedisServerError(
                "redis-sentinel is not installed: run 'make system-deps' as root, or"
                " 'sudo apt-get install redis-sentinel'"
            )
        self._process = subprocess.Popen(
            [binary, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError):
                if self.client().ping():
                    return
            time.sleep(0.05)
        raise RedisServerError(f"redis-sentinel on port {self.port} did not answer PING")

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, socket_timeout=2, decode_responses=True)

    def log_tail(self, lines: int = 12) -> str:
        """The last lines of this Sentinel's log (its failover events), for an error message."""
        path = Path(self._dir.name) / "sentinel.log"
        try:
            return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return f"no log ({error})"

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        self._dir.cleanup()


class SentinelTopology:
    def __init__(self) -> None:
        self.first = RedisServer()
        self.first.start()
        self.relay = Relay(upstream_port=self.first.port)
        self.relay.start()
        self.second = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(self.relay.port)))
        self.second.start()
        self.sentinels = [Sentinel(primary_port=self.first.port) for _ in range(3)]
        atexit.register(self.close)
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait_in_sync(timeout=30)
        self._wait_discovered(timeout=30)

    @property
    def addresses(self) -> str:
        """``AGENTIHOOKS_SWARM_REDIS_SENTINELS`` for this topology."""
        return ",".join(f"{s.host}:{s.port}" for s in self.sentinels)

    def settings(self, **options: Any) -> settings_.Settings:
        """The operator's settings for this topology (its Sentinels, a 3 s Redis timeout), with
        ``options`` (``redis_min_replicas=1``...)."""
        return settings_.Settings(
            redis_mode="sentinel", redis_sentinels=self.addresses, redis_timeout_seconds=3, **options
        )

    def primary_port(self, sentinel: Sentinel | None = None) -> int:
        """The primary's port as a Sentinel names it."""
        found: Any = (sentinel or self.sentinels[0]).client().sentinel_get_master_addr_by_name(MASTER)
        return int(found[1])

    def primary(self) -> RedisServer:
        port = self.primary_port()
        return self.first if self.first.port == port else self.second

    def replica(self) -> RedisServer:
        return self.second if self.primary() is self.first else self.first

    def kill_primary(self) -> RedisServer:
        """``kill -9`` the current primary; returns it (stopped)."""
        victim = self.primary()
        victim.kill()
        return victim

    def wait_promoted(self, *, old: RedisServer, timeout: float = 45) -> RedisServer:
        """Wait until every Sentinel names a new primary that answers as a master.

        Sentinels elect one of them to run the failover; a split vote or an aborted attempt makes
        each wait twice the failover timeout (6 minutes here, kept long for the relay) before it
        tries again. When no Sentinel names a new primary once an election could have finished,
        one is told to fail over without a vote (``SENTINEL FAILOVER``), as an administrator
        would: these tests are about the operator during a promotion, not Sentinel's election.
        """
        started = time.monotonic()
        deadline = started + timeout
        next_force = started + ELECTION_S
        while time.monotonic() < deadline:
            ports = set()
            for sentinel in self.sentinels:
                with contextlib.suppress(redis.exceptions.RedisError):
                    ports.add(self.primary_port(sentinel))
            if len(ports) == 1 and old.port not in ports:
                new = self.primary()
                with contextlib.suppress(redis.exceptions.RedisError):
                    if redis.Redis(port=new.port, socket_timeout=2).info("replication")["role"] == "master":
                        return new
            if ports == {old.port} and time.monotonic() >= next_force:
                self._force_failover()
                next_force = time.monotonic() + ELECTION_S / 2
            time.sleep(0.1)
        raise RedisServerError(f"Sentinel did not promote a replica within {timeout}s; {self._logs()}")

    def _force_failover(self) -> None:
        for sentinel in self.sentinels:
            # INPROG (an election still running) and NOGOODSLAVE (no fresh replica yet) are
            # answers to wait on; the next round asks again.
            with contextlib.suppress(redis.exceptions.RedisError):
                sentinel.client().sentinel_failover(MASTER)
                return

    def _logs(self) -> str:
        return "; ".join(f"Sentinel {s.port}: {s.log_tail()}" for s in self.sentinels)

    def wait_in_sync(self, *, timeout: float = 30) -> None:
        """Wait until the replica's link is up and its offset has reached the primary's."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError, KeyError):
                primary = redis.Redis(port=self.primary().port, socket_timeout=2).info("replication")
                replica = redis.Redis(port=self.replica().port, socket_timeout=2).info("replication")
                if (
                    replica.get("master_link_status") == "up"
                    and int(replica["slave_repl_offset"]) >= int(primary["master_repl_offset"])
                    and int(primary.get("connected_slaves", 0)) >= 1
                ):
                    return
            time.sleep(0.1)
        raise RedisServerError(f"the replica did not catch up within {timeout}s")

    def _wait_discovered(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError):
                known: list[Any] = [
                    (s.client().sentinel_slaves(MASTER), s.client().sentinel_sentinels(MASTER))
                    for s in self.sentinels
                ]
                if all(len(replicas) >= 1 and len(peers) >= 2 for replicas, peers in known):
                    return
            time.sleep(0.1)
        raise RedisServerError("the Sentinels did not discover the replica and each other")

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()
        self.sentinels = []
        self.relay.close()
        self.first.close()
        self.second.close()

    def __enter__(self) -> SentinelTopology:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
