"""Captures of arbitrary Pod statuses and logs round-trip through the real Redis unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from hypothesis import given, settings

from agentihooks_swarm import records, settings as settings_, store as store_
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.storage import operations
from tests.support.arbitrary_pods import Logs, log_bytes, pod_status
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


@settings(max_examples=150, deadline=None)
@given(status=pod_status, raw=log_bytes)
def test_capture_round_trips_through_redis(redis_server: RedisServer, status: Any, raw: bytes) -> None:
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u"}, "status": status}
    capture = asyncio.run(diagnostics.startup(pod, Logs(raw)))
    if capture is None:
        return
    record = records.StartupRecord(pod="p", uid="u", labels={"k": "v"}, startup=capture)

    async def store_and_read() -> records.StartupRecord | None:
        async with operations.open_store(settings_.Settings(redis_url=redis_server.url)) as opened:
            await opened.redis.delete(opened.key("prop", store_.STARTUP_DIAGNOSTICS))
            assert await opened.record_startup(slug="prop", execution="e", record=record) == record
            return await opened.read_startup(slug="prop", execution="e")

    assert asyncio.run(store_and_read()) == record
    with redis.Redis.from_url(redis_server.url) as client:
        raw_stored = client.hget(store_.key("agentihooks-swarm", "prop", store_.STARTUP_DIAGNOSTICS), "e")
    assert raw_stored is not None and records.load(records.StartupRecord, raw_stored) == record
