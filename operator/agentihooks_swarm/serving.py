"""The operator running: its wiring, its supervised tasks, its metrics and probes, for as long as a
block lasts.

Both ways to run it use :func:`running`: ``python -m agentihooks_swarm run`` (its own main, which
runs kopf in a thread of its own and handles the signals) and ``kopf run -m
agentihooks_swarm.handlers`` (kopf's CLI hosts it: its start-up handler enters this block, its
clean-up handler leaves it). Either way the same tasks run under the same supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
from collections.abc import AsyncIterator, Callable

from agentihooks_swarm import app as app_, health, secure_metrics, settings as settings_
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import reviews

logger = logging.getLogger("agentihooks_swarm")

#: The line logged once the operator runs (tests, the demo and the chart's proof wait for it).
STARTED = "agentihooks-swarm started"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Running:
    """The running operator, as kopf's handlers reach it (they may run in another thread)."""

    app: app_.App
    #: The event loop its collaborators live in.
    loop: asyncio.AbstractEventLoop


@contextlib.asynccontextmanager
async def running(
    *,
    settings: settings_.Settings,
    probes: tuple[str, int] | None,
    on_give_up: Callable[[str], None],
    capture: diagnostics.Capture = diagnostics.startup,
) -> AsyncIterator[Running]:
    """Start the operator's tasks (the Lease decided first, so a leader starts at once) and the
    probes; stop them, and give the Lease up, when the block ends.

    ``on_give_up`` is told when the supervisor gives a task up: the operator must stop.
    ``capture`` is always :func:`diagnostics.startup` when the operator runs as itself; only the
    bench passes another (its capture-free baseline), in-process.
    """
    async with app_.open_app(settings=settings, capture=capture) as app, contextlib.AsyncExitStack() as stack:
        app.supervisor.on_give_up = on_give_up
        if settings.metrics_port and settings.metrics_tls_cert_file and settings.metrics_tls_key_file:
            reviewer = (
                reviews.Reviewer(transport=app.cluster.transport) if settings.metrics_authorize else None
            )
            context = secure_metrics.tls_context(
                cert_file=settings.metrics_tls_cert_file, key_file=settings.metrics_tls_key_file
            )
            await stack.enter_async_context(
                secure_metrics.serving(
                    host="0.0.0.0",  # Scraped from other Pods; NetworkPolicies narrow who.
                    port=settings.metrics_port,
                    render=app.metrics.render,
                    context=context,
                    reviewer=reviewer,
                )
            )
        elif settings.metrics_port:
            app.metrics.serve(port=settings.metrics_port)
        if probes is not None:
            host, port = probes
            await stack.enter_async_context(
                health.serving(host=host, port=port, healthy=app.problems, ready=app.synced)
            )
        await app.leader.attempt()
        for runnable in app.runnables():
            app.supervisor.start(runnable)
        stack.push_async_callback(app.leader.release)
        stack.push_async_callback(app.supervisor.stop)
        try:
            await app.store.ping()
        except Exception as e:
            logger.error("%s; captures cannot be stored until it is back, so refused pods are kept.", e)
        _settle_memory()
        logger.info("%s (namespace: %s).", STARTED, ", ".join(settings.served_namespaces) or "all")
        yield Running(app=app, loop=asyncio.get_running_loop())
        logger.info("agentihooks-swarm stopping.")


def _settle_memory() -> None:
    """What is alive now (the modules: kubernetes-asyncio's client alone is tens of MiB of objects)
    lives as long as the process: the collector need not traverse it again in every full
    collection. Each step allocates thousands of short-lived objects (JSON, requests, tasks), so
    the young generation is collected every 5,000 allocations, not 700."""
    gc.freeze()
    gc.set_threshold(5000, 10, 10)
