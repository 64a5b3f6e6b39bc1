"""The soak's Redis against real servers and Sentinels: an operator's partition cuts it, and only
it, off Redis, while the Sentinels keep seeing the servers; a failover reaches the operators
through their proxies."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
import redis.sentinel

from tests.soak.checker.observe import not_a_primary
from tests.soak.redis_net import RedisNet
from tests.soak.redis_set import DOWN_AFTER_MS, SentinelSet
from tests.support.redis_sentinel import MASTER

pytestmark = pytest.mark.integration


@pytest.fixture
def rig() -> Iterator[tuple[SentinelSet, RedisNet]]:
    with (
        SentinelSet() as redis_set,
        RedisNet(
            servers=redis_set.server_ports, sentinels=redis_set.sentinel_ports, clients=("a", "b")
        ) as net,
    ):
        yield redis_set, net


def _client(net: RedisNet, name: str) -> redis.Redis:
    """An operator's view: redis-py's Sentinel client on that operator's Sentinel proxies."""
    addresses = [(a.split(":")[0], int(a.split(":")[1])) for a in net.sentinel_addresses(name).split(",")]
    sentinel = redis.sentinel.Sentinel(addresses, sentinel_kwargs={"socket_timeout": 1})  # type: ignore[no-untyped-call,unused-ignore]
    client: redis.Redis = sentinel.master_for(MASTER, socket_timeout=1, socket_connect_timeout=1)  # type: ignore[no-untyped-call,unused-ignore]
    return client


def _works(client: redis.Redis) -> bool:
    try:
        return bool(client.set("soak-net", "1"))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        return False


def test_a_partition_cuts_one_operator_only_and_sentinel_fails_nothing_over(
    rig: tuple[SentinelSet, RedisNet],
) -> None:
    redis_set, net = rig
    a, b = _client(net, "a"), _client(net, "b")
    primary = redis_set.primary_port()
    assert primary is not None
    assert _works(a) and _works(b)
    connection = a.connection_pool.get_connection()
    try:
        assert connection.port == net.server_proxies["a"][primary]
    finally:
        a.connection_pool.release(connection)

    net.partition("a")
    try:
        began = time.monotonic()
        assert not _works(a)
        assert time.monotonic() - began >= 0.9  # A timeout, as when packets are dropped.
        assert _works(b)
        time.sleep(DOWN_AFTER_MS / 1000 + 2)
        assert redis_set.primary_port() == primary  # The Sentinels saw the primary all along.
    finally:
        net.heal("a")
    deadline = time.monotonic() + 10
    while not _works(a):
        assert time.monotonic() < deadline, "operator a did not reach Redis again after the partition"
        time.sleep(0.2)
    a.close()
    b.close()


def test_a_failover_reaches_the_operator_through_its_proxies(rig: tuple[SentinelSet, RedisNet]) -> None:
    redis_set, net = rig
    a = _client(net, "a")
    assert _works(a)
    old = redis_set.primary()
    assert old is not None
    old.kill()
    deadline = time.monotonic() + 60
    while redis_set.primary_port() in (None, old.port):
        assert time.monotonic() < deadline, "no failover"
        time.sleep(0.2)
    new = redis_set.primary_port()
    assert new is not None
    while not _works(a):
        assert time.monotonic() < deadline, "operator a never wrote to the new primary"
        time.sleep(0.2)
    assert redis.Redis(port=new).get("soak-net") == b"1"
    old.start()
    redis_set.wait_settled(timeout=60)
    a.close()


def test_the_checker_reads_the_agreed_primary_not_a_killed_one_started_again() -> None:
    """A primary killed and started again after its failover answers as a primary of its own,
    without what was written since, until the Sentinels make it a replica: the checker's reads
    (``SentinelSet.agreed_primary``, the probe's ``ROLE``) refuse it and read the new primary."""
    with SentinelSet() as redis_set:
        old = redis_set.primary()
        assert old is not None
        old.kill()
        deadline = time.monotonic() + 60
        while redis_set.primary_port() in (None, old.port):
            assert time.monotonic() < deadline, redis_set.describe()
            time.sleep(0.2)
        while True:  # The other replica follows the new primary once it has synced from it.
            try:
                new = redis_set.agreed_primary()
                break
            except redis.exceptions.ConnectionError:
                assert time.monotonic() < deadline, redis_set.describe()
                time.sleep(0.2)
        assert new.set("written-after-the-failover", "1")
        assert new.execute_command("WAIT", 1, 2000) >= 1  # type: ignore[no-untyped-call,unused-ignore]
        old.start()

        returned = redis.Redis(port=old.port, socket_timeout=2, decode_responses=True)
        role = returned.execute_command("ROLE")  # type: ignore[no-untyped-call,unused-ignore]
        assert role[0] == "master", role
        assert returned.get("written-after-the-failover") is None
        assert not_a_primary(role) == "a primary with no replica in sync"

        agreed = redis_set.agreed_primary()
        assert agreed.connection_pool.connection_kwargs["port"] != old.port
        assert agreed.get("written-after-the-failover") == "1"
        returned.close()
        agreed.close()
        new.close()


def test_a_replica_is_not_read_as_the_primary() -> None:
    with SentinelSet() as redis_set:
        replica = redis_set.replicas()[0]
        role = redis.Redis(port=replica.port, socket_timeout=2).execute_command("ROLE")  # type: ignore[no-untyped-call,unused-ignore]
        assert not_a_primary(role) == "a slave"
        primary = redis_set.agreed_primary()
        assert not_a_primary(primary.execute_command("ROLE")) is None  # type: ignore[no-untyped-call,unused-ignore]
        primary.close()
