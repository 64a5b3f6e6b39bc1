"""A Redis Cluster on loopback: three primaries and three replicas, made by ``redis-cli --cluster``.

Six cluster-enabled ``redis-server`` processes (each a :class:`RedisServer` with its own directory
and ``nodes.conf``, so a killed node restarts as the same node) joined with ``redis-cli --cluster
create --cluster-replicas 1``. A node is declared failed after 1 s (``cluster-node-timeout``), so a
``kill -9`` of a primary is followed by its replica's promotion within a few seconds.
:meth:`ClusterTopology.move_slot` moves slots with ``redis-cli --cluster reshard``.

Redis 7.0 (Debian 12's 7.0.15) can lose a slot after a reshard, a failover and the old primary's
return; :meth:`ClusterTopology.restart_replicas` says how, and what the topology does about it.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import time
from typing import Any

import redis
from redis.crc import key_slot

from agentihooks_swarm import settings as settings_
from tests.support.redis_server import RedisServer, RedisServerError, free_port

NODE_TIMEOUT_MS = 1000


def redis_cli() -> str:
    found = shutil.which("redis-cli")
    if found is None:
        raise RedisServerError(
            "redis-cli is not installed: run 'make system-deps-kwok' as root, or"
            " 'sudo apt-get install redis-tools'"
        )
    return found


def _start_node(args: tuple[str, ...], *, attempts: int = 3) -> RedisServer:
    """A started cluster node. Its bus port is chosen too (not port + 10000, which may be taken or
    too high), free a moment before, so it is chosen again when another process took it in
    between: :class:`RedisServer` chooses its port again, but the bus port is one of its
    arguments."""
    last_error: RedisServerError | None = None
    for _ in range(attempts):
        server = RedisServer(extra_args=(*args, "--cluster-port", str(free_port())))
        try:
            server.start()
        except RedisServerError as error:
            server.close()
            last_error = error
        else:
            return server
    assert last_error is not None
    raise last_error


class ClusterTopology:
    def __init__(self, *, nodes: int = 6) -> None:
        # A replica that connects (a restarted node) is sent its full sync at once, not after the
        # 5 s redis-server waits by default for more replicas to share one diskless transfer.
        args = (
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--repl-diskless-sync-delay", "0",
        )  # fmt: skip
        self.servers: list[RedisServer] = []
        atexit.register(self.close)
        for _ in range(nodes):
            self.servers.append(_start_node(args))
        self._cli(
            "--cluster", "create", *(f"127.0.0.1:{s.port}" for s in self.servers),
            "--cluster-replicas", "1", "--cluster-yes",
        )  # fmt: skip
        self.wait_healthy(timeout=30)
        self.wait_replicated(timeout=30)

    @property
    def url(self) -> str:
        """``AGENTIHOOKS_SWARM_REDIS_URL`` for cluster mode: any node."""
        return self.servers[0].url

    def settings(self, **options: Any) -> settings_.Settings:
        """The operator's settings for this cluster (any node, a 3 s Redis timeout), with ``options``
        (``redis_min_replicas=1``...)."""
        return settings_.Settings(
            redis_mode="cluster", redis_url=self.url, redis_timeout_seconds=3, **options
        )

    def _cli(self, *args: str, timeout: float = 60) -> str:
        result = subprocess.run(
            [redis_cli(), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise RedisServerError(
                f"redis-cli {' '.join(args)}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
            )
        return result.stdout

    def _client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(port=server.port, socket_timeout=2, decode_responses=True)

    def nodes(self) -> list[dict[str, Any]]:
        """``CLUSTER NODES`` as seen by the first live node that answers (see :meth:`view`)."""
        for server in self.servers:
            if not server.running:
                continue
            with contextlib.suppress(redis.exceptions.RedisError):
                return self.view(server)
        raise RedisServerError("no cluster node answers")

    def view(self, server: RedisServer) -> list[dict[str, Any]]:
        """``CLUSTER NODES`` as ``server`` sees it: each node's id, port, bus port, role, its
        primary's id, config epoch and slots, and which node is ``server`` itself."""
        text = str(self._client(server).execute_command("CLUSTER", "NODES"))  # type: ignore[no-untyped-call]
        found = []
        for line in text.splitlines():
            parts = line.split()
            slots: list[int] = []
            for spec in parts[8:]:
                if spec.startswith("["):
                    continue
                low, _, high = spec.partition("-")
                slots += range(int(low), int(high or low) + 1)
            address, _, bus = parts[1].split(",")[0].partition("@")
            found.append(
                {
                    "id": parts[0],
                    "port": int(address.rsplit(":", 1)[1]),
                    "bus_port": int(bus),
                    "myself": "myself" in parts[2],
                    "primary": "master" in parts[2],
                    "replicates": None if parts[3] == "-" else parts[3],
                    "failed": "fail" in parts[2] and "fail?" not in parts[2],
                    "config_epoch": int(parts[6]),
                    "slots": slots,
                }
            )
        return found

    def info(self, server: RedisServer) -> dict[str, str]:
        """``CLUSTER INFO`` of ``server``: ``cluster_state``, ``cluster_current_epoch``…"""
        text = str(self._client(server).execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
        return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)

    def owner(self, key: str) -> dict[str, Any]:
        slot = key_slot(key.encode())
        return next(n for n in self.nodes() if n["primary"] and slot in n["slots"])

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def move_slot(self, *, key: str, count: int) -> tuple[int, int]:
        """:meth:`reshard`, then :meth:`restart_replicas` of the new owner: a slot move that a
        failover of the new owner and its return as a replica survive on Redis 7.0."""
        source, target = self.reshard(key=key, count=count)
        self.restart_replicas(primary=target)
        return source, target

    def reshard(self, *, key: str, count: int) -> tuple[int, int]:
        """Move the ``count`` lowest slots of ``key``'s primary (``key``'s slot among them, the
        caller makes sure) to another primary with ``redis-cli --cluster reshard``; return the two
        primaries' ports."""
        source = self.owner(key)
        target = next(n for n in self.nodes() if n["primary"] and n["id"] != source["id"] and n["slots"])
        self._cli(
            "--cluster", "reshard", f"127.0.0.1:{source['port']}",
            "--cluster-from", source["id"], "--cluster-to", target["id"],
            "--cluster-slots", str(count), "--cluster-yes",
        )  # fmt: skip
        return source["port"], target["port"]

    def restart_replicas(self, *, primary: int) -> None:
        """Restart the replicas of the primary on port ``primary``; wait until every node sees the
        slots it announces (:meth:`wait_agreed`) and its replicas are in sync.

        After a reshard, for a Redis 7.0 bug (Debian 12's 7.0.15; fixed in 7.2.4 by
        redis/redis#12564). During a reshard the new owner announces its slots after each
        ``SETSLOT``, on both connections a node keeps to each other node, so its replica can read
        an older announcement (slots 0-8) after a newer one (0-9). The replica then marks slot 9
        "owner does not claim it". The mark lives in memory only, and is cleared only when the
        owner's announced slots change again, which they do not. If that replica is promoted,
        its own slot 9 keeps the mark, and when the killed primary comes back with its
        nodes.conf, its first announcement (slot 9, an older epoch) is taken for an unclaimed
        slot: the new primary gives slot 9 up while every other node says it owns it, and the
        cluster answers CLUSTERDOWN for good. A restarted replica loads the slots from its
        nodes.conf without the mark, and its new connections carry only announcements made after
        the reshard. (:mod:`tests.support.redis_cluster_bus` sends such a late announcement.)

        Waiting for agreement matters too: a replica that has not yet heard its primary announce
        slot 9 does not take it over when promoted, and slot 9 stays with the dead primary.
        """
        owner = next(n for n in self.nodes() if n["port"] == primary)
        for replica in [n for n in self.nodes() if n["replicates"] == owner["id"]]:
            self.server(replica["port"]).restart()
        self.wait_agreed(primary=primary, timeout=30)
        self.wait_healthy(timeout=30)
        self.wait_replicated(timeout=30)

    def wait_agreed(self, *, primary: int, timeout: float = 30) -> None:
        """Every running node sees the primary on port ``primary`` with the slots it announces."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError, StopIteration):
                own = next(n for n in self.view(self.server(primary)) if n["myself"])["slots"]
                seen = [
                    next(n for n in self.view(server) if n["port"] == primary)["slots"]
                    for server in self.servers
                    if server.running
                ]
                if all(slots == own for slots in seen):
                    return
            time.sleep(0.1)
        raise RedisServerError(
            f"the nodes do not agree on the slots of port {primary} after {timeout}s:\n{self.describe()}"
        )

    def kill_owner(self, *, key: str) -> RedisServer:
        """``kill -9`` the primary that serves ``key``."""
        victim = self.server(self.owner(key)["port"])
        victim.kill()
        return victim

    def wait_healthy(self, *, timeout: float = 30) -> None:
        """Every slot served (``cluster_state:ok``) on every running node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for server in self.servers:
                if server.running:
                    with contextlib.suppress(redis.exceptions.RedisError):
                        states.append(self._client(server).execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
            if states and all("cluster_state:ok" in str(s) for s in states):
                return
            time.sleep(0.1)
        raise RedisServerError(f"the cluster is not ok after {timeout}s:\n{self.describe()}")

    def describe(self) -> str:
        """Each node's own view (state, epoch, ``CLUSTER NODES``) and its log's last lines."""
        parts = []
        for server in self.servers:
            view = "not running"
            if server.running:
                try:
                    client = self._client(server)
                    info = str(client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
                    state = " ".join(
                        line.strip()
                        for line in info.splitlines()
                        if line.startswith(("cluster_state", "cluster_current_epoch", "cluster_slots_"))
                    )
                    view = f"{state}\n{client.execute_command('CLUSTER', 'NODES')}"  # type: ignore[no-untyped-call]
                except redis.exceptions.RedisError as e:
                    view = f"no answer: {e}"
            log = (
                server.log_file.read_text(errors="replace").splitlines()[-15:]
                if server.log_file.exists()
                else []
            )
            parts.append(f"--- node {server.port}: {view}\n" + "\n".join(log))
        return "\n".join(parts)

    def wait_replicated(self, *, timeout: float = 30) -> None:
        """Every primary with a slot has a replica whose link is up and in sync."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError, RedisServerError):
                primaries = [n for n in self.nodes() if n["primary"] and n["slots"]]
                infos = [self._client(self.server(n["port"])).info("replication") for n in primaries]
                if primaries and all(
                    int(i.get("connected_slaves", 0)) >= 1
                    and i.get("slave0", {}).get("state") == "online"
                    and int(i["slave0"]["offset"]) >= int(i["master_repl_offset"])
                    for i in infos
                ):
                    return
            time.sleep(0.1)
        raise RedisServerError(f"the cluster's replicas are not in sync after {timeout}s")

    def wait_promoted(self, *, old: RedisServer, key: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RedisServerError, StopIteration):
                if self.owner(key)["port"] != old.port:
                    self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
                    return
            time.sleep(0.1)
        raise RedisServerError(f"no replica of port {old.port} was promoted within {timeout}s")

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> ClusterTopology:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
