"""``/metrics`` over TLS with each scrape's bearer token checked by the real API server (TokenReview,
then SubjectAccessReview of get on the non-resource URL /metrics): a ServiceAccount bound to a
ClusterRole that allows it reads the metrics, one without that right gets 403, no token or a token
the API server does not know gets 401."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import secure_metrics
from agentihooks_swarm.kubernetes import reviews, transport
from tests.support import tls

pytestmark = pytest.mark.integration

BODY = b"# TYPE agentihooks_swarm_test_total counter\nagentihooks_swarm_test_total 1.0\n"


@contextlib.asynccontextmanager
async def metrics_reader(api: client.ApiClient, *, namespace: str) -> AsyncIterator[None]:
    """The ServiceAccount ``scraper`` may get /metrics (a ClusterRole and its binding, removed after)."""
    rbac = client.RbacAuthorizationV1Api(api)
    name = f"metrics-reader-{namespace}"
    role: Any = {"metadata": {"name": name}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
    binding: Any = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}],
    }
    await rbac.create_cluster_role(role)
    try:
        await rbac.create_cluster_role_binding(binding)
        try:
            yield
        finally:
            await rbac.delete_cluster_role_binding(name)
    finally:
        await rbac.delete_cluster_role(name)


async def token_of(api: client.ApiClient, *, namespace: str, account: str) -> str:
    core = client.CoreV1Api(api)
    body: Any = {"metadata": {"name": account}}
    await core.create_namespaced_service_account(namespace, body)
    request: Any = {"spec": {"expirationSeconds": 600}}
    made = await core.create_namespaced_service_account_token(account, namespace, request)
    token: str = made.status.token
    return token


async def scrape(port: int, *, ca: Path, token: str | None) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(ca))
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://127.0.0.1:{port}/metrics", headers=headers, ssl=context) as response,
    ):
        return response.status, await response.read()


async def test_only_a_token_allowed_to_get_metrics_reads_them(
    admin_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    cert = tls.server_cert(tmp_path, names="IP:127.0.0.1")
    scraper = await token_of(admin_api, namespace=namespace, account="scraper")
    stranger = await token_of(admin_api, namespace=namespace, account="stranger")
    shared = transport.Transport(api=admin_api, timeout=10.0)
    reviewer = reviews.Reviewer(transport=shared)
    context = secure_metrics.tls_context(cert_file=str(cert.cert), key_file=str(cert.key))
    async with (
        metrics_reader(admin_api, namespace=namespace),
        secure_metrics.serving(
            host="127.0.0.1", port=0, render=lambda: BODY, context=context, reviewer=reviewer
        ) as port,
    ):
        assert await scrape(port, ca=cert.ca, token=scraper) == (200, BODY)
        assert (await scrape(port, ca=cert.ca, token=stranger))[0] == 403
        assert (await scrape(port, ca=cert.ca, token=None))[0] == 401
        assert (await scrape(port, ca=cert.ca, token="not-a-token"))[0] == 401
        # A second scrape within the kept seconds is answered without asking again, and alike.
        assert await scrape(port, ca=cert.ca, token=scraper) == (200, BODY)


async def test_without_a_reviewer_it_is_tls_only(tmp_path: Path) -> None:
    cert = tls.server_cert(tmp_path, names="IP:127.0.0.1")
    context = secure_metrics.tls_context(cert_file=str(cert.cert), key_file=str(cert.key))
    async with secure_metrics.serving(
        host="127.0.0.1", port=0, render=lambda: BODY, context=context, reviewer=None
    ) as port:
        assert await scrape(port, ca=cert.ca, token=None) == (200, BODY)
        with pytest.raises(aiohttp.ClientError):  # Plain HTTP is not spoken.
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/metrics") as r,
            ):
                await r.read()
