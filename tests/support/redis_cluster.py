"""A Redis Cluster on loopback: three primaries and three replicas, made by ``redis-cli --cluster``.

Six cluster-enabled ``redis-server`` processes (each a :class:`RedisServer` with its own directory
and ``nodes.conf``, so a killed node restarts as the same node) joined with ``redis-cli --cluster
create --cluster-replicas 1``. A node is declared failed after 1 s (``cluster-node-timeout``), so a
``kill -9`` of a primary is followed by its replica's promotion within a few seconds.
:meth:`ClusterTopology.move_slot` moves one slot with ``redis-cli --cluster reshard``.
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


class ClusterTopology:
    def __init__(self, *, nodes: int = 6) -> None:
        args = (
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        )  # fmt: skip
        # Each node's bus port is chosen too (not port + 10000, which may be taken or too high).
        self.servers = [
            RedisServer(extra_args=(*args, "--cluster-port", str(free_port()))) for _ in range(nodes)
        ]
        atexit.register(self.close)
        for server in self.servers:
            server.start()
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
        """``CLUSTER NODES`` as seen by a live node: id, port, role, primary id, slots."""
        for server in self.servers:
            if not server.running:
                continue
            with contextlib.suppress(redis.exceptions.RedisError):
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
                    found.append(
                        {
                            "id": parts[0],
                            "port": int(parts[1].split("@")[0].rsplit(":", 1)[1]),
                            "primary": "master" in parts[2],
                            "failed": "fail" in parts[2] and "fail?" not in parts[2],
                            "slots": slots,
                        }
                    )
                return found
        raise RedisServerError("no cluster node answers")

    def owner(self, key: str) -> dict[str, Any]:
        slot = key_slot(key.encode())
        return next(n for n in self.nodes() if n["primary"] and slot in n["slots"])

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def move_slot(self, *, key: str, count: int) -> tuple[int, int]:
        """Move the ``count`` lowest slots of ``key``'s primary (``key``'s slot among them, the
        caller makes sure) to another primary with ``redis-cli --cluster reshard``."""
        source = self.owner(key)
        target = next(n for n in self.nodes() if n["primary"] and n["id"] != source["id"] and n["slots"])
        self._cli(
            "--cluster", "reshard", f"127.0.0.1:{source['port']}",
            "--cluster-from", source["id"], "--cluster-to", target["id"],
            "--cluster-slots", str(count), "--cluster-yes",
        )  # fmt: skip
        return source["port"], target["port"]

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
