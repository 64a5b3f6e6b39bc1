"""One final cleanup pass run in-process over a planted attempt (``tests/support/planting.py``),
and what it leaves: the retained record, the Pod gone."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm import records
from agentihooks_swarm.lifecycle import cleanup, events, model
from agentihooks_swarm.storage import operations
from tests.support import pods
from tests.support.planting import SLUG


def final_for(
    attempt: model.Attempt, state: records.FinalState = records.FinalState.FAILED
) -> records.FinalRecord:
    return records.FinalRecord(
        execution=attempt.execution,
        generation=attempt.generation,
        state=state,
        transcript_end=0,
        outcome="attempt-outcomes",
        at="2026-11-29T00:00:00Z",
    )


async def run_pass(
    runtime: model.Runtime,
    store: operations.AsyncStore,
    attempt: model.Attempt,
    *,
    guard: model.Guard | None = None,
    notify: events.Collected | None = None,
) -> records.Retained:
    """As a step runs it (:func:`attempts.advance`): the attempt's records read first, a retained
    record returned (a journal entry left beside it removed), else the pass from the entry read."""
    stored = await store.read_attempt(slug=attempt.slug, execution=attempt.execution)
    if stored.retained is not None:
        if stored.journal is not None:
            await store.clear_journal(slug=attempt.slug, execution=attempt.execution)
        return stored.retained
    return await cleanup.run(
        runtime=runtime,
        store=store,
        guard=guard or model.Unguarded(),
        attempt=attempt,
        final=final_for(attempt),
        watermark=0,
        archived=True,
        notify=notify or events.Collected(),
        journal=stored.journal,
    )


async def retained_of(store: operations.AsyncStore, attempt: model.Attempt) -> dict[str, Any]:
    raw = await store.redis.hget(store.key(SLUG, "attempt-retained"), attempt.execution)
    assert raw is not None
    found: dict[str, Any] = json.loads(raw)
    return found


async def gone(api: client.ApiClient, namespace: str, name: str) -> None:
    core = client.CoreV1Api(api)
    await pods.wait_for_absent(read=lambda: core.read_namespaced_pod(name, namespace), what=name)
