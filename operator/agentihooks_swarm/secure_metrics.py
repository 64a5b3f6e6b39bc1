"""``/metrics`` over TLS, each scrape's bearer token checked by the API server when asked.

The plain endpoint (``metrics.Metrics.serve``, prometheus_client's own server) is for a network
that NetworkPolicies close. This one serves the same text over TLS, and with a reviewer answers
only a token whose user may ``get`` the non-resource URL ``/metrics`` (``kubernetes/reviews.py``):
401 without a token or with one the API server does not know, 403 for a user without that right,
503 while the API server cannot answer.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import prometheus_client
from aiohttp import web

from agentihooks_swarm import errors

logger = logging.getLogger(__name__)


class Reviewer(Protocol):
    """What the API server says of a token (``kubernetes.reviews.Reviewer``, passed in):
    ``unauthenticated``, ``forbidden`` or ``allowed``."""

    async def verdict(self, *, token: str) -> str: ...


def tls_context(*, cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert_file, keyfile=key_file)
    return context


@contextlib.asynccontextmanager
async def serving(
    *,
    host: str,
    port: int,
    render: Callable[[], bytes],
    context: ssl.SSLContext,
    reviewer: Reviewer | None,
) -> AsyncIterator[int]:
    """Serve ``/metrics`` on ``host:port`` (0: any free port, yielded) while the block runs."""

    async def metrics(request: web.Request) -> web.Response:
        if reviewer is not None:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return web.Response(status=401, text="Unauthorized: a bearer token is needed\n")
            try:
                verdict = await reviewer.verdict(token=token.strip())
            except errors.ApiError as e:
                logger.warning("A metrics scrape was not answered: %s", e)
                return web.Response(status=503, text="The API server did not answer the token review\n")
            if verdict == "unauthenticated":
                return web.Response(status=401, text="Unauthorized: the API server does not know the token\n")
            if verdict == "forbidden":
                return web.Response(status=403, text="Forbidden: get on /metrics is not allowed\n")
        body = render()
        return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics)])
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port, ssl_context=context, reuse_address=True)
    await site.start()
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    logger.info(
        "Metrics served over TLS on %s:%d%s.", host, bound, " (bearer tokens checked)" if reviewer else ""
    )
    try:
        yield bound
    finally:
        await runner.cleanup()
