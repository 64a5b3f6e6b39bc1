"""The controller's Redis client over TLS, against a real redis-server: a server whose certificate
names another host is refused, unless REDIS_TLS_CHECK_HOSTNAME=false says otherwise (and a
warning says so); one whose certificate names the host connected to is accepted."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agentihooks_swarm import settings as settings_
from agentihooks_swarm.storage import topology
from tests.support import tls
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def serving(directory: Path, *, names: str) -> Iterator[tuple[tls.ServerCert, int]]:
    cert = tls.server_cert(directory, names=names)
    port = free_port()
    with RedisServer(extra_args=tls.redis_tls_args(cert, port=port)):
        yield cert, port


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[tuple[tls.ServerCert, int]]:
    """A TLS Redis on 127.0.0.1 whose certificate is for elsewhere.example only."""
    with serving(tmp_path, names="DNS:elsewhere.example") as served:
        yield served


def settings(cert: tls.ServerCert, port: int, **more: str) -> settings_.Settings:
    return settings_.Settings.from_env(
        {
            "AGENTIHOOKS_SWARM_REDIS_URL": f"rediss://127.0.0.1:{port}/0",
            "AGENTIHOOKS_SWARM_REDIS_CA_FILE": str(cert.ca),
            **{f"AGENTIHOOKS_SWARM_{k}": v for k, v in more.items()},
        }
    )


async def test_a_certificate_for_another_name_is_refused(elsewhere: tuple[tls.ServerCert, int]) -> None:
    cert, port = elsewhere
    client = topology.async_client(settings(cert, port))
    try:
        with pytest.raises(
            redis.ConnectionError, match=re.escape("certificate is not valid for '127.0.0.1'")
        ):
            await client.ping()
    finally:
        await client.aclose()
    with pytest.raises(redis.ConnectionError, match="certificate is not valid"):
        topology.sync_client(settings(cert, port)).ping()


async def test_the_opt_out_accepts_it_and_warns(
    elsewhere: tuple[tls.ServerCert, int], caplog: pytest.LogCaptureFixture
) -> None:
    cert, port = elsewhere
    with caplog.at_level(logging.WARNING, logger=topology.__name__):
        client = topology.async_client(settings(cert, port, REDIS_TLS_CHECK_HOSTNAME="false"))
    try:
        assert await client.ping() is True
    finally:
        await client.aclose()
    assert any("host name is not checked" in r.getMessage() for r in caplog.records)


async def test_a_certificate_for_the_host_is_accepted(tmp_path: Path) -> None:
    with serving(tmp_path, names="IP:127.0.0.1") as (cert, port):
        client = topology.async_client(settings(cert, port))
        try:
            assert await client.set("k", "v") is True and await client.get("k") == "v"
        finally:
            await client.aclose()
