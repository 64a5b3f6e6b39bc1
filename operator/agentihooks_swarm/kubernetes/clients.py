"""The operator's Kubernetes clients, one for each kind it touches, all on one :class:`transport.Transport`
(one connection pool, one hold after a 429): :func:`build` makes them from an ``ApiClient``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from kubernetes_asyncio import client as k8s

from agentihooks_swarm.kubernetes import core, custom, leases, pods, posting, transport as transport_


@dataclasses.dataclass(frozen=True, kw_only=True)
class Clients:
    """Each client named for what it holds; they share ``transport``."""

    transport: transport_.Transport
    pods: pods.PodClient
    config_maps: core.CoreClient
    services: core.CoreClient
    swarms: custom.CustomClient
    executions: custom.CustomClient
    leases: leases.LeaseClient
    events: posting.EventClient


def build(*, api: k8s.ApiClient, timeout: float, clock: Callable[[], float] = time.monotonic) -> Clients:
    """The clients on one transport over ``api``, each request answered within ``timeout`` seconds."""
    shared = transport_.Transport(api=api, timeout=timeout, clock=clock)
    return Clients(
        transport=shared,
        pods=pods.PodClient(transport=shared),
        config_maps=core.CoreClient(transport=shared, plural="configmaps"),
        services=core.CoreClient(transport=shared, plural="services"),
        swarms=custom.CustomClient(transport=shared, plural="swarms"),
        executions=custom.CustomClient(transport=shared, plural="executions"),
        leases=leases.LeaseClient(transport=shared),
        events=posting.EventClient(transport=shared),
    )
