"""The soak's ``redis-lost-writes`` against real servers and Sentinels: writes the primary
acknowledged are missing on the replica the Sentinels promote, and stay missing once the old
primary is back (as a replica: its copy is replaced), so only a writer that puts them back brings
them back. What the fault reports lost is what the promoted server lacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from tests.soak.redis_set import SentinelSet, _replicaof
from tests.support.redis_relay import Relay
from tests.support.redis_server import RedisServerError

pytestmark = pytest.mark.integration

KEY = "agentihooks-swarm:{soak}:attempt-retained"


@pytest.fixture
def redis_set() -> Iterator[SentinelSet]:
    with SentinelSet() as started:
        yield started


def test_a_hold_then_a_kill_loses_writes_the_primary_acknowledged(redis_set: SentinelSet) -> None:
    acknowledged: list[str] = []
    stop = threading.Event()

    def write() -> None:
        client = redis_set.client(timeout=1)
        index = 0
        while not stop.is_set():
            try:
                client.hset(KEY, f"e{index}", "x")  # Answered: acknowledged by the primary.
                acknowledged.append(f"e{index}")
            except redis.exceptions.RedisError:
                pass
            index += 1
            time.sleep(0.01)

    writer = threading.Thread(target=write, name="writer")
    writer.start()
    try:
        time.sleep(0.5)
        loss = redis_set.lose_writes(hold=1.5, pattern="agentihooks-swarm:*")
        stop.set()
        writer.join()
        loss.promoted = redis_set.wait_promoted(old=loss.primary)
        lost = loss.lost().get(KEY, set())
        assert lost and loss.count() == len(lost) and loss.by_hash() == {"attempt-retained": len(lost)}
        assert lost <= set(acknowledged)  # Each was answered to the writer.
        promoted = redis.Redis(port=loss.promoted, decode_responses=True)
        assert not any(promoted.hexists(KEY, field) for field in lost)  # The loss is real.
        assert loss.behind[loss.promoted] > 0
        assert not redis_set.holding.is_set() and redis_set.holds_done == 1

        loss.primary.start()  # Back from its AOF, with them: the Sentinels make it a replica.
        redis_set.wait_settled(timeout=120, replicas=2)
        assert redis_set.present(loss.lost()) == 0  # Still gone: its copy was replaced.
        promoted.close()
    finally:
        stop.set()
        writer.join()


def test_a_hold_waits_for_a_forget_under_way_and_lets_none_start(redis_set: SentinelSet) -> None:
    assert redis_set.gate.enter()
    holding = threading.Thread(
        target=redis_set.lose_writes, kwargs={"hold": 0.2, "pattern": "agentihooks-swarm:*"}
    )
    holding.start()
    time.sleep(0.5)
    assert not redis_set.holding.is_set()  # It waits for the forget under way...
    assert not redis_set.gate.enter()  # ...and lets no other start.
    redis_set.gate.leave()
    holding.join(timeout=60)
    assert not holding.is_alive() and redis_set.holds_done == 1
    assert redis_set.gate.enter()  # Open again once the primary is killed.
    redis_set.gate.leave()


def test_a_failover_kill_waits_until_the_replicas_have_what_the_primary_acknowledged(
    redis_set: SentinelSet,
) -> None:
    """``wait_replicated``, which a ``redis-primary-kill`` runs before its kill while the operators
    run with ``REDIS_MIN_REPLICAS=0``: a replica whose link is held keeps it waiting, and it returns
    once that replica has the write."""
    primary = redis_set.primary()
    assert primary is not None
    held = redis_set.replicas()[0]
    relay = Relay(upstream_port=primary.port)
    relay.start()
    try:
        _replicaof(held, relay.port)
        redis_set._wait_linked(primary, {held.port: relay.port})
        relay.hold()
        writer = redis.Redis(port=primary.port)
        writer.hset(KEY, "e1", "x")  # Acknowledged by the primary alone.
        with pytest.raises(RedisServerError, match="did not reach offset"):
            redis_set.wait_replicated(primary, timeout=2)
        relay.release()
        redis_set.wait_replicated(primary, timeout=10)
        reader = redis.Redis(port=held.port)
        assert reader.hexists(KEY, "e1")
        writer.close()
        reader.close()
    finally:
        relay.close()
        _replicaof(held, primary.port)
