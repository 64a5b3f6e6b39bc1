"""The Lease election (controller/leadership.py) on the real API server, through the fault proxy:
a renewal answered late runs this replica's Lease out in its own clock without ending its term;
another replica taking the Lease does end it. What a replica kept for a failover restore follows
the term (storage/failover.py), so this is what keeps a late renewal from costing evidence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.controller import leadership
from agentihooks_swarm.kubernetes import clients
from tests.support.fixtures_cluster import api_client
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.integration

LEASE = "swarm-controller"
#: The shortest Lease the API server keeps whole (its duration is whole seconds).
SECONDS = 2.0


def lease_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}"


async def elect(
    api: client.ApiClient, *, namespace: str, holder: str, seconds: float = SECONDS, margin: float = 0.5
) -> leadership.Leadership:
    """A replica's election; it holds the Lease for ``seconds - margin`` after sending a renewal."""
    return leadership.Leadership(
        leases=clients.build(api=api, timeout=10.0).leases,
        namespace=namespace,
        name=LEASE,
        holder=holder,
        duration=seconds,
        margin=margin,
    )


async def a_led_then_stopped(
    api: client.ApiClient, *, namespace: str
) -> tuple[leadership.Leadership, leadership.Leadership, int]:
    """Replicas a and b; a took the Lease (its term is returned) and stopped renewing until it expired."""
    a = await elect(api, namespace=namespace, holder="a")
    b = await elect(api, namespace=namespace, holder="b")
    assert await a.attempt() and a.term is not None
    await asyncio.sleep(SECONDS + 0.5)
    return a, b, a.term


@pytest.fixture
async def proxied(proxy_kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    async with api_client(kubeconfig=proxy_kubeconfig) as api:
        yield api


async def test_a_renewal_answered_late_runs_the_lease_out_but_keeps_the_term(
    proxied: client.ApiClient, admin_api: client.ApiClient, namespace: str, fault_proxy: FaultProxy
) -> None:
    # a holds for 2 s after sending; the Lease (4 s) keeps others out 2 s longer.
    a = await elect(proxied, namespace=namespace, holder="a", seconds=4.0, margin=2.0)
    b = await elect(admin_api, namespace=namespace, holder="b", seconds=4.0, margin=2.0)
    assert a.term is None  # Never held.
    assert await a.attempt() and a.holds()
    first = a.term
    assert first is not None

    # The renewal's answer comes back after the Lease ran out in a's clock.
    fault_proxy.delay(seconds=2.5, path=lease_path(namespace), method="PUT")
    assert await a.attempt()
    assert not a.holds()  # Held until sent + duration - margin: already past.
    assert a.term == first  # Nobody else held it: the same term.
    assert not await b.attempt()  # The Lease (renewed by a) is a's for b too.
    assert b.term is None

    assert await a.attempt() and a.holds() and a.term == first  # Renewed in time: the same term.


async def test_another_replica_that_takes_the_lease_ends_the_term(
    admin_api: client.ApiClient, namespace: str
) -> None:
    a, b, first = await a_led_then_stopped(admin_api, namespace=namespace)
    assert await b.attempt() and b.term is not None and b.term != first
    assert not await a.attempt()  # a sees b hold it: a's term is over.
    assert a.term is None and not a.holds()

    await asyncio.sleep(SECONDS + 0.5)  # Now b stops; a takes it back in a term of its own.
    assert await a.attempt()
    assert a.term is not None and a.term not in (first, b.term)


async def test_a_lease_taken_and_given_back_unseen_is_still_a_new_term(
    admin_api: client.ApiClient, namespace: str
) -> None:
    """a never read the Lease while b held it: the term still tells that b led in between."""
    a, b, first = await a_led_then_stopped(admin_api, namespace=namespace)
    assert await b.attempt()
    await b.release()
    assert await a.attempt()
    assert a.term is not None and a.term != first
