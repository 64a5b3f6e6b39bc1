"""pytest fixtures for the real services: redis-server and the fault proxy.

Loaded with ``pytest_plugins = ["tests.support.fixtures_services"]``. The proxy
fixtures need a ``control_plane`` fixture (from ``tests.support.fixtures_cluster``)
with ``.server`` (https URL), ``.ca_file``, ``.admin_token`` and ``.kubeconfig``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.support.proxy import FaultProxy
from tests.support.redis_cluster import ClusterTopology
from tests.support.redis_sentinel import SentinelTopology
from tests.support.redis_server import RedisServer

__all__ = [
    "ControlPlaneLike",
    "cluster_topology",
    "fault_proxy",
    "fault_proxy_kubeconfig",
    "proxy_kubeconfig",
    "redis_server",
    "redis_url",
    "sentinel_topology",
    "threaded_fault_proxy",
    "threaded_tls_fault_proxy",
]


class ControlPlaneLike(Protocol):
    @property
    def server(self) -> str: ...

    @property
    def ca_file(self) -> Path: ...

    @property
    def admin_token(self) -> str: ...


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the whole session (installed with apt-get when absent)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The session's Redis, running, thawed and empty; left running and thawed after the test."""
    _make_healthy(redis_server)
    redis_server.flushall()
    yield redis_server.url
    _make_healthy(redis_server)


@pytest.fixture
def sentinel_topology() -> Iterator[SentinelTopology]:
    """A Redis primary, its replica (through a relay the test can hold) and three Sentinels, the
    test's own."""
    with SentinelTopology() as started:
        yield started


@pytest.fixture
def cluster_topology() -> Iterator[ClusterTopology]:
    """A Redis Cluster of three primaries and three replicas, the test's own."""
    with ClusterTopology() as started:
        yield started


def _make_healthy(server: RedisServer) -> None:
    if server.frozen:
        server.thaw()
    if not server.running:
        server.start()


@pytest.fixture
async def fault_proxy(control_plane: ControlPlaneLike) -> AsyncIterator[FaultProxy]:
    """A FaultProxy in the test's event loop, in front of the control plane's kube-apiserver."""
    async with FaultProxy(upstream=control_plane.server, ca_file=control_plane.ca_file) as proxy:
        yield proxy


@pytest.fixture
def threaded_fault_proxy(control_plane: ControlPlaneLike) -> Iterator[FaultProxy]:
    """A FaultProxy in its own thread, for sync code and operator subprocesses."""
    with FaultProxy(upstream=control_plane.server, ca_file=control_plane.ca_file) as proxy:
        yield proxy


@pytest.fixture
def threaded_tls_fault_proxy(control_plane: ControlPlaneLike) -> Iterator[FaultProxy]:
    """Like ``threaded_fault_proxy`` but listening on HTTPS, for Go clients (kubectl).

    kubectl/client-go send no bearer token to a plain-HTTP server. The proxy serves the
    apiserver's own certificate (SAN 127.0.0.1, signed by the control plane's CA, found as
    ``apiserver.crt``/``apiserver.key`` beside ``control_plane.ca_file``).
    """
    pki = control_plane.ca_file.parent
    cert, key = pki / "apiserver.crt", pki / "apiserver.key"
    if not (cert.is_file() and key.is_file()):
        raise FileNotFoundError(f"no serving certificate for the TLS fault proxy: {cert} / {key}")
    proxy = FaultProxy(
        upstream=control_plane.server,
        ca_file=control_plane.ca_file,
        tls_cert_file=cert,
        tls_key_file=key,
        tls_ca_file=control_plane.ca_file,
    )
    with proxy:
        yield proxy


@pytest.fixture
def proxy_kubeconfig(fault_proxy: FaultProxy, control_plane: ControlPlaneLike, tmp_path: Path) -> Path:
    """A kubeconfig (admin token) pointing at ``fault_proxy`` (plain HTTP: Python clients)."""
    return fault_proxy.kubeconfig(token=control_plane.admin_token, path=tmp_path / "proxy.kubeconfig")


@pytest.fixture
def fault_proxy_kubeconfig(
    threaded_fault_proxy: FaultProxy, control_plane: ControlPlaneLike, tmp_path: Path
) -> Path:
    """A kubeconfig (admin token) pointing at ``threaded_fault_proxy`` (plain HTTP: Python clients)."""
    return threaded_fault_proxy.kubeconfig(
        token=control_plane.admin_token, path=tmp_path / "fault-proxy.kubeconfig"
    )
