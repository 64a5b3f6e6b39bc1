"""The PodClient on the real API server, through the fault proxy: a 429 holds back what follows."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentihooks_swarm import errors
from tests.support.fixtures_operator import RuntimeFactory
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.integration


async def test_a_429_holds_back_the_clients_next_requests_for_its_retry_after(
    namespace: str,
    threaded_fault_proxy: FaultProxy,
    fault_proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
) -> None:
    path = rf"/api/v1/namespaces/{namespace}/pods/absent"
    threaded_fault_proxy.fail(method="GET", path=path, status=429, times=1, retry_after=2)
    async with runtime_for(fault_proxy_kubeconfig) as runtime:
        sent = time.monotonic()  # The hold counts from the 429's arrival, after this.
        with pytest.raises(errors.ApiUnavailable, match="429"):
            await runtime.pods.read(namespace=namespace, name="absent")
        # Three steps' requests at once: none is sent before the hold ends, then all go.
        found = await asyncio.gather(
            *(runtime.pods.read(namespace=namespace, name="absent") for _ in range(3))
        )
        waited = time.monotonic() - sent
        after = time.monotonic()
        assert await runtime.pods.read(namespace=namespace, name="absent") is None
        unheld = time.monotonic() - after
    assert found == [None, None, None]
    assert waited >= 2.0, f"the requests after a 429 with Retry-After: 2 were answered after {waited:.2f}s"
    assert unheld < waited  # The hold is over: the next request is not held again.
    assert threaded_fault_proxy.count(method="GET", path=path) == 5
