"""The real redis-server helper: lifecycle on a fixed port, data, outages, freezes, passwords."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.redis_server import RedisServer, RedisServerError

# redis-py retries ConnectionError (AuthenticationError is one) 3 times with backoff by default.
NO_RETRY = Retry(NoBackoff(), 0)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_stop_restart_on_the_same_port(server: RedisServer) -> None:
    port = server.port
    url = server.url
    assert url == f"redis://127.0.0.1:{port}/0"
    first_pid = server.pid
    assert first_pid is not None
    assert server.running
    assert server.ping()

    server.stop()
    assert not server.running
    assert server.pid is None
    assert not server.ping(timeout=0.2)
    assert not _pid_alive(first_pid)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass

    server.start()
    assert server.port == port
    assert server.url == url
    assert server.pid not in (None, first_pid)
    assert server.ping()


def test_data_operations_and_no_persistence(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        assert client.set("pod:a", "refused") is True
        assert client.get("pod:a") == "refused"
        assert client.hset("evidence:a", mapping={"exit": "1", "log": "boom"}) == 2
        assert client.hgetall("evidence:a") == {"exit": "1", "log": "boom"}
        assert client.rpush("events", "x", "y") == 2
        assert client.lrange("events", 0, -1) == ["x", "y"]
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        assert client.dbsize() == 3
    finally:
        client.close()

    # No persistence: a restart starts empty.
    server.restart()
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        assert client.dbsize() == 0
    finally:
        client.close()


def test_outage_raises_connection_error_then_recovers(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    try:
        assert client.set("k", "v") is True
        server.stop()
        with pytest.raises(redis.ConnectionError):
            client.get("k")
        server.start()
        # Same port: the same client reconnects by itself (the data is gone: no persistence).
        assert client.get("k") is None
        assert client.set("k", "v2") is True
        assert client.get("k") == b"v2"
    finally:
        client.close()


async def test_outage_with_asyncio_client(server: RedisServer) -> None:
    client = redis.asyncio.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    try:
        assert await client.ping() is True
        server.stop()
        with pytest.raises(redis.ConnectionError):
            await client.ping()
        server.start()
        assert await client.ping() is True
    finally:
        await client.aclose()


def test_freeze_makes_commands_time_out_and_thaw_recovers(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=0.3, socket_connect_timeout=0.3)
    try:
        assert client.set("k", "v") is True
        server.freeze()
        assert server.frozen
        with pytest.raises(redis.TimeoutError):
            client.get("k")
        server.thaw()
        assert not server.frozen
        assert client.get("k") == b"v"
    finally:
        client.close()


def test_pause_thaws_by_itself(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    try:
        started = time.monotonic()
        server.pause(0.5)
        assert client.ping() is True  # waits for the thaw instead of failing
        assert time.monotonic() - started >= 0.45
        assert not server.frozen
    finally:
        client.close()


def test_client_pause_slows_commands(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    try:
        server.client_pause(400)
        started = time.monotonic()
        assert client.set("k", "v") is True
        assert time.monotonic() - started >= 0.3
    finally:
        client.close()


def test_stop_while_frozen(server: RedisServer) -> None:
    pid = server.pid
    assert pid is not None
    server.freeze()
    server.stop()
    assert not _pid_alive(pid)
    server.start()
    assert server.ping()


def test_flushall(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    try:
        client.set("a", "1")
        server.flushall()
        assert client.dbsize() == 0
    finally:
        client.close()


def test_password_variant() -> None:
    with RedisServer(password="s3cr/t") as server:
        assert server.url == f"redis://:s3cr%2Ft@127.0.0.1:{server.port}/0"
        assert server.ping()
        server.flushall()
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert client.set("k", "v") is True
        finally:
            client.close()
        anonymous = redis.Redis(host="127.0.0.1", port=server.port, retry=NO_RETRY)
        try:
            with pytest.raises(redis.AuthenticationError):
                anonymous.get("k")
        finally:
            anonymous.close()
        wrong = redis.Redis(host="127.0.0.1", port=server.port, password="nope", retry=NO_RETRY)
        try:
            with pytest.raises(redis.AuthenticationError):
                wrong.get("k")
        finally:
            wrong.close()


def test_close_removes_the_directory_and_kills_the_process_group() -> None:
    server = RedisServer()
    server.start()
    directory = server.directory
    pid = server.pid
    assert pid is not None
    assert os.getpgid(pid) == pid  # its own process group
    assert directory.is_dir()
    server.close()
    assert not directory.exists()
    assert not _pid_alive(pid)


def test_start_on_a_taken_port_fails_clearly() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        server = RedisServer(port=port, startup_timeout=5)
        # The error names the port, says someone else holds it, and how to find out who.
        with pytest.raises(RedisServerError, match=f"port {port} is taken by another process .*ss -ltnp"):
            server.start()
        server.close()


def test_a_killed_server_is_detected_and_restartable(server: RedisServer) -> None:
    pid = server.pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while server.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not server.running
    server.start()
    assert server.ping()


def test_redis_url_fixture_leaves_a_dirty_stopped_server(redis_server: RedisServer, redis_url: str) -> None:
    assert redis_url == redis_server.url
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0
        assert client.set("leftover", "1") is True
    finally:
        client.close()
    redis_server.freeze()
    redis_server.stop()  # the fixture brings it back for the next test


def test_redis_url_fixture_gives_a_running_empty_server(redis_server: RedisServer, redis_url: str) -> None:
    assert redis_server.running
    assert not redis_server.frozen
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0
    finally:
        client.close()
