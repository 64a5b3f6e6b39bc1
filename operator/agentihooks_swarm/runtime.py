"""Building the operator's collaborators from settings: the API client, PodClient, store, metrics.

Kept apart from ``handlers`` so the same wiring serves ``kopf run`` and the command-line tools.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client as k8s, config as k8s_config

from agentihooks_swarm import launch, metrics, settings as settings_, store
from agentihooks_swarm.kubernetes import event_index, pods

logger = logging.getLogger(__name__)

#: kubernetes-asyncio's read buffer (large watch events), kept when its session is replaced.
_READ_BUFSIZE = 2**21


async def api_client() -> k8s.ApiClient:
    """An API client from the in-cluster service account, else from KUBECONFIG / ~/.kube/config."""
    configuration = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        logger.info("Using the in-cluster service account.")
    except k8s_config.ConfigException:
        await k8s_config.load_kube_config(client_configuration=configuration)
        logger.info("Using the kubeconfig at %s.", configuration.host)
    api = k8s.ApiClient(configuration=configuration)
    if not _environment_matters():
        _skip_environment_lookups(api)
    return api


def _environment_matters() -> bool:
    """Whether aiohttp's ``trust_env`` would find anything: a proxy variable or a netrc file."""
    netrc = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    return bool(urllib.request.getproxies()) or netrc.exists()


def _skip_environment_lookups(api: k8s.ApiClient) -> None:
    """Give kubernetes-asyncio's client a session that does not look up the environment per request.

    Its aiohttp session is made with ``trust_env=True``, so before *every* request aiohttp reads
    the netrc file and the proxy variables, each in a worker thread: two thread hand-offs per
    request, a quarter of the operator's CPU in ``make bench`` (py-spy). When the environment has
    neither (checked once, here) that work finds nothing, so the same connector (its connection
    limit and TLS context) is moved to a session without it; with a proxy or netrc it is kept.
    """
    old: aiohttp.ClientSession = api.rest_client.pool_manager
    api.rest_client.pool_manager = aiohttp.ClientSession(
        connector=old.connector, trust_env=False, read_bufsize=_READ_BUFSIZE
    )
    old.detach()


@contextlib.asynccontextmanager
async def open_runtime(
    *, settings: settings_.Settings, collector: metrics.Metrics
) -> AsyncIterator[tuple[launch.Runtime, store.AsyncStore]]:
    api = await api_client()
    client = pods.PodClient(api=api, timeout=settings.api_timeout_seconds)
    try:
        async with store.open_store(settings, metrics=collector) as redis_store:
            yield (
                launch.Runtime(
                    pods=client,
                    recorder=redis_store,
                    metrics=collector,
                    startup_deadline_seconds=settings.startup_deadline_seconds,
                    # Filled once its task runs (handlers' start-up); until it is in sync, or
                    # without it, captures list each Pod's Events.
                    events=event_index.EventIndex(
                        client=client, namespace=settings.namespace, metrics=collector
                    ),
                ),
                redis_store,
            )
    finally:
        await api.close()
