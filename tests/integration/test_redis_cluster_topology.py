"""The Redis Cluster the operator's cluster-mode tests stand on (``tests/support/redis_cluster.py``).

The operator's failover test (``test_redis_cluster.py``) moves the swarm's slot, kills its new
owner and starts it again. On Debian 12's Redis 7.0 that lost the slot for good in about one run
in ten: a replica of the new owner had read an announcement of its primary from before the move
after a newer one (:meth:`ClusterTopology.restart_replicas` says what follows). Two tests here make
that late announcement on demand, with a message of their own on the cluster bus, and then the
killed node's first announcement when it returns. Another one takes a node's bus port before the
node binds it.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from tests.support import redis_cluster, redis_cluster_bus, redis_server
from tests.support.redis_cluster import ClusterTopology
from tests.support.redis_server import ensure_redis_server_binary

pytestmark = pytest.mark.integration

#: A key whose slot is among the ten lowest of the first primary, so ``reshard(count=10)`` moves it.
KEY = next(f"swarm-{i}" for i in range(100_000) if key_slot(f"swarm-{i}".encode()) < 10)
SLOT = key_slot(KEY.encode())


@pytest.fixture
def topology() -> Iterator[ClusterTopology]:
    with ClusterTopology() as started:
        yield started


def _redis_version() -> tuple[int, int, int]:
    shown = subprocess.run(
        [ensure_redis_server_binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"v=(\d+)\.(\d+)\.(\d+)", shown)
    assert found is not None, shown
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def _announce_late(topology: ClusterTopology, *, primary: int) -> None:
    """Make the replicas of ``primary`` read its announcement from before it owned ``SLOT``."""
    owner = next(n for n in topology.view(topology.server(primary)) if n["myself"])
    epoch = int(topology.info(topology.server(primary))["cluster_current_epoch"])
    before = [slot for slot in owner["slots"] if slot != SLOT]
    message = redis_cluster_bus.ping(sender=owner, current_epoch=epoch, slots=before)
    for replica in [n for n in topology.nodes() if n["replicates"] == owner["id"]]:
        redis_cluster_bus.announce(bus_port=replica["bus_port"], message=message)


def _fail_over(topology: ClusterTopology) -> tuple[dict[str, Any], int, int]:
    """``kill -9`` ``KEY``'s primary and wait for its replica's promotion; return the killed node as
    it saw itself, its current epoch, and the promoted node's port."""
    killed = topology.owner(KEY)
    current_epoch = int(topology.info(topology.server(killed["port"]))["cluster_current_epoch"])
    victim = topology.kill_owner(key=KEY)
    topology.wait_promoted(old=victim, key=KEY)
    promoted: int = topology.owner(KEY)["port"]
    return killed, current_epoch, promoted


def _announce_return(
    topology: ClusterTopology, *, killed: dict[str, Any], current_epoch: int, to: int
) -> None:
    """Send the node on port ``to`` what ``killed`` announces first when it starts again with its
    nodes.conf: the slots it owned, at its old config epoch.

    Sent here, not left to a restart: a restarted node's first announcement races the promoted
    node's, and when the promoted node's arrives first the returning node turns replica at once and
    claims nothing, so the slot was kept whether or not it carried the mark.
    """
    message = redis_cluster_bus.ping(sender=killed, current_epoch=current_epoch, slots=killed["slots"])
    bus_port = next(n["bus_port"] for n in topology.nodes() if n["port"] == to)
    redis_cluster_bus.announce(bus_port=bus_port, message=message)


def _slots_of(topology: ClusterTopology, port: int, *, seen_by: int) -> list[int]:
    slots: list[int] = next(n for n in topology.view(topology.server(seen_by)) if n["port"] == port)["slots"]
    return slots


def test_redis_7_0_drops_a_slot_whose_late_announcement_the_promoted_replica_had_read(
    topology: ClusterTopology,
) -> None:
    """Without :meth:`ClusterTopology.restart_replicas`, the late announcement loses the slot: the
    promoted node gives it up when the killed node returns, while the others say it owns it."""
    if _redis_version() >= (7, 2, 4):
        pytest.skip("Redis 7.2.4 and later clear the mark when a slot changes owner (redis/redis#12564)")
    source, target = topology.reshard(key=KEY, count=10)
    topology.wait_agreed(primary=target)
    _announce_late(topology, primary=target)
    killed, current_epoch, promoted = _fail_over(topology)
    _announce_return(topology, killed=killed, current_epoch=current_epoch, to=promoted)

    # The node answers a PING after it has processed it, so the slot is gone by now.
    assert SLOT not in _slots_of(topology, promoted, seen_by=promoted), topology.describe()
    assert SLOT in _slots_of(topology, promoted, seen_by=source)
    # The node marks itself down in its next state update after it gave up the slot, not at once.
    deadline = time.monotonic() + 10
    while topology.info(topology.server(promoted))["cluster_state"] != "fail":
        assert time.monotonic() < deadline, (
            f"port {promoted} still says cluster_state ok:\n{topology.describe()}"
        )
        time.sleep(0.1)


def test_a_slot_move_keeps_its_slot_through_a_late_announcement_a_failover_and_the_old_owners_return(
    topology: ClusterTopology,
) -> None:
    """:meth:`ClusterTopology.move_slot`'s restart of the new owner's replicas drops the mark the
    late announcement left: the promoted node keeps every slot when the killed node returns."""
    source, target = topology.reshard(key=KEY, count=10)
    topology.wait_agreed(primary=target)
    _announce_late(topology, primary=target)
    topology.restart_replicas(primary=target)
    killed, current_epoch, promoted = _fail_over(topology)
    _announce_return(topology, killed=killed, current_epoch=current_epoch, to=promoted)
    assert SLOT in _slots_of(topology, promoted, seen_by=promoted), topology.describe()

    topology.server(killed["port"]).start()
    topology.wait_replicated(timeout=30)  # The killed node is back, as the promoted node's replica.
    topology.wait_healthy(timeout=30)
    assert SLOT in _slots_of(topology, promoted, seen_by=promoted)
    assert SLOT in _slots_of(topology, promoted, seen_by=source)


def test_a_node_whose_bus_port_is_taken_before_it_binds_it_gets_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bus port is chosen free and bound by redis-server a moment later; another process (a
    client's ephemeral port) may take it in between, and the node then gets another one. Here the
    first bus port chosen is already taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port: int = taken.getsockname()[1]
        choices = iter([port])

        def free_port() -> int:
            return next(choices, None) or redis_server.free_port()

        monkeypatch.setattr(redis_cluster, "free_port", free_port)
        with ClusterTopology() as topology:
            assert port not in {node["bus_port"] for node in topology.nodes()}
            assert len(topology.nodes()) == 6
