"""The operator's background tasks (all but kopf's), wired as ``run`` wires them, in the test's
event loop: for integration tests that need the leader's passes, informers and steps on the real
API server and Redis without an operator process."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from agentihooks_swarm import app as app_, metrics as metrics_, settings as settings_
from agentihooks_swarm.kubernetes import clients
from agentihooks_swarm.storage import operations
from tests.support.fixtures_cluster import api_client


@contextlib.asynccontextmanager
async def running(
    *,
    kubeconfig: Path,
    store: operations.AsyncStore,
    settings: settings_.Settings,
    identity: str,
    backoff_seconds: float | None = None,
) -> AsyncIterator[app_.App]:
    """The app built on ``settings`` and ``store``, leading, its tasks supervised until the end."""
    async with api_client(kubeconfig=kubeconfig) as api:
        app = app_.build(
            settings=settings,
            metrics=metrics_.Metrics(),
            cluster=clients.build(api=api, timeout=settings.api_timeout_seconds),
            store=store,
            identity=identity,
        )
        if backoff_seconds is not None:
            app.supervisor.backoff_seconds = backoff_seconds
        await app.leader.attempt()
        for runnable in app.runnables():
            app.supervisor.start(runnable)
        try:
            yield app
        finally:
            await app.supervisor.stop()
            await app.leader.release()
