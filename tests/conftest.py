"""Shared pytest setup: the real services' fixtures and the operator's own test support.

Integration (``tests/integration``) and end-to-end (``tests/e2e``, ``tests/faults``) tests run
against a real kube-apiserver + etcd + kwok and a real redis-server, all started on loopback by
the fixtures in ``tests/support``. Unit tests (``tests/unit``) need none of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest_plugins = [
    "pytester",  # the tooling's own tests run a pytest session in-process
    "tests.support.fixtures_cluster",
    "tests.support.fixtures_services",
    "tests.support.fixtures_operator",
    "tests.support.fixtures_rig",
    "tests.support.fixtures_scene",
]


@pytest.fixture(autouse=True)
async def _no_tasks_left_behind() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running (set up first, so it checks after the rest)."""
    before = asyncio.all_tasks()
    yield
    for _ in range(3):  # Let cancelled tasks finish.
        await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()]
    for task in left:
        task.cancel()
    assert not left, f"the test left asyncio tasks running: {left}"
