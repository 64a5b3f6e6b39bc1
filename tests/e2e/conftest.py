"""End-to-end tests run the operator as a process (``python -m agentihooks_swarm run``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import AOF, RedisServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def aof_redis_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, with AOF as the chart runs it: ``restart()`` stops and
    starts the real process on the same port and data directory (the data stays, the replication id
    is new). A test module that overrides ``redis_url`` with its ``url`` runs the operator on it."""
    with RedisServer(extra_args=AOF) as server:
        yield server
