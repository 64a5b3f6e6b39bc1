"""The one reliance on kubernetes-asyncio's internals (kubernetes/api.py): its REST client keeps its
aiohttp session in ``rest_client.pool_manager``, made with ``trust_env=True``; the operator moves
its connector to a session that does not look the environment up before every request."""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client as k8s

from agentihooks_swarm.kubernetes import api


async def test_the_rest_clients_session_is_where_the_operator_replaces_it() -> None:
    configuration = k8s.Configuration()
    configuration.host = "https://127.0.0.1:1"
    client = k8s.ApiClient(configuration=configuration)
    try:
        session = client.rest_client.pool_manager
        assert isinstance(session, aiohttp.ClientSession) and session.trust_env
        connector = session.connector
        api.skip_environment_lookups(client)
        replaced = client.rest_client.pool_manager
        assert replaced is not session and not replaced.trust_env
        assert replaced.connector is connector
    finally:
        await client.close()
    assert connector is not None and connector.closed
