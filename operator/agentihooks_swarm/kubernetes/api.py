"""The kubernetes-asyncio ``ApiClient`` the operator's clients send their requests through
(:mod:`.transport`).

One reliance on kubernetes-asyncio's internals lives here, with a test
(``tests/unit/test_kubernetes_api.py``) that fails if a release changes it: its REST client keeps
its aiohttp session in ``rest_client.pool_manager``, made with ``trust_env=True``. With that, before
*every* request aiohttp reads the netrc file and the proxy variables, each in a worker thread: two
thread hand-offs per request, a quarter of the operator's CPU under load. When the environment
has neither (checked once, here) that work finds nothing, so the same connector (its connection
limit and TLS context) is moved to a session without it; with a proxy or a netrc it is kept.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from pathlib import Path
from typing import Final

import aiohttp
from kubernetes_asyncio import client as k8s, config as k8s_config

logger = logging.getLogger(__name__)

#: kubernetes-asyncio's read buffer (large watch events), kept when its session is replaced.
READ_BUFSIZE: Final = 2**21


async def configuration() -> k8s.Configuration:
    """The credentials to reach the API server: the in-cluster service account, else the
    kubeconfig (KUBECONFIG, or ~/.kube/config). Read anew on each call: a service account's
    token file is rotated."""
    loaded = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=loaded)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        await k8s_config.load_kube_config(client_configuration=loaded)
    return loaded


async def client() -> k8s.ApiClient:
    """An API client on :func:`configuration`."""
    loaded = await configuration()
    logger.info("Talking to the API server at %s.", loaded.host)
    api = k8s.ApiClient(configuration=loaded)
    if not environment_matters():
        skip_environment_lookups(api)
    return api


def environment_matters() -> bool:
    """Whether aiohttp's ``trust_env`` would find anything: a proxy variable or a netrc file."""
    netrc = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    return bool(urllib.request.getproxies()) or netrc.exists()


def skip_environment_lookups(api: k8s.ApiClient) -> None:
    """Give ``api`` a session that does not look the environment up per request (same connector)."""
    old: aiohttp.ClientSession = api.rest_client.pool_manager
    api.rest_client.pool_manager = aiohttp.ClientSession(
        connector=old.connector, trust_env=False, read_bufsize=READ_BUFSIZE
    )
    old.detach()
