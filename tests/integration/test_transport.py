"""The clients' one transport on the real API server, through the fault proxy: a 429 holds back
what follows, of every client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from agentihooks_swarm import errors
from tests.support.fixtures_operator import RuntimeFactory
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.integration


async def _absent(read: Awaitable[object]) -> float:
    """When a read that finds nothing was answered."""
    assert await read is None
    return time.monotonic()


async def test_a_429_holds_back_the_clients_next_requests_for_its_retry_after(
    namespace: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
) -> None:
    path = rf"/api/v1/namespaces/{namespace}/pods/absent"
    threaded_fault_proxy.fail(method="GET", path=path, status=429, times=1, retry_after=2)
    async with runtime_for(fault_proxy_kubeconfig) as runtime:
        pods, services = runtime.cluster.pods, runtime.cluster.services
        sent = time.monotonic()  # The hold counts from the 429's arrival, after this.
        with pytest.raises(errors.ApiUnavailable, match="429"):
            await pods.read(namespace=namespace, name="absent")
        # Three steps' requests at once, one of them to another kind (the clients share one
        # transport): none is sent before the hold ends, then all go.
        answered = await asyncio.gather(
            _absent(pods.read(namespace=namespace, name="absent")),
            _absent(pods.read(namespace=namespace, name="absent")),
            _absent(services.read(namespace=namespace, name="absent")),
        )
        waited = min(answered) - sent
        after = time.monotonic()
        assert await pods.read(namespace=namespace, name="absent") is None
        unheld = time.monotonic() - after
    assert waited >= 2.0, f"a request after a 429 with Retry-After: 2 was answered after {waited:.2f}s"
    assert unheld < waited  # The hold is over: the next request is not held again.
    assert threaded_fault_proxy.count(method="GET", path=path) == 4
