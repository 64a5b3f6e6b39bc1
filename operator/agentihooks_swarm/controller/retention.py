"""Retention: the leader removes executions whose cleanup finished longer ago than the retention.

Without it every record stays forever and Redis only grows (up to 64 KiB of log per container per
refused Pod). Each pass walks the swarms listed in ``PREFIX:swarms`` and, per swarm, runs the
store's sweep script on that swarm's retention index (its own slot, so legal on a cluster) in
batches of :data:`storage.keys.SWEEP_BATCH`, at most :data:`MAX_BATCHES` of them per swarm and pass: the
sweep never scans the keyspace and never holds Redis for long. A journal entry (an unfinished
cleanup) is never swept, nor are the records of an execution that has not retained yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Final

from agentihooks_swarm import errors, metrics as metrics_
from agentihooks_swarm.controller import leadership
from agentihooks_swarm.lifecycle import model
from agentihooks_swarm.storage import keys, operations

logger = logging.getLogger(__name__)

#: Batches per swarm per pass; the rest waits for the next pass.
MAX_BATCHES: Final = 10


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pass:
    removed: int
    kept: int
    swarms: int


async def sweep(
    *,
    store: operations.AsyncStore,
    guard: model.Guard,
    retention_seconds: float,
    batch: int = keys.SWEEP_BATCH,
) -> Pass:
    """One bounded pass over every swarm. Raises ``NotLeader`` or ``StoreUnavailable``."""
    removed = kept = 0
    slugs = await store.swarms()
    for slug in slugs:
        for _ in range(MAX_BATCHES):
            guard.check(before=f"sweeping the records of swarm {slug}")
            swept = await store.sweep(slug=slug, retention_seconds=retention_seconds, batch=batch)
            removed += swept.removed
            kept += swept.kept
            if swept.removed + swept.kept < batch:
                break
    return Pass(removed=removed, kept=kept, swarms=len(slugs))


async def run(
    *,
    store: operations.AsyncStore,
    guard: leadership.Leadership,
    metrics: metrics_.Metrics,
    retention_seconds: float,
    interval_seconds: float,
) -> None:
    """Sweep every ``interval_seconds`` while this replica leads (a background task, forever)."""
    while True:
        await asyncio.sleep(interval_seconds)
        if not guard.holds():
            continue
        try:
            done = await sweep(store=store, guard=guard, retention_seconds=retention_seconds)
        except errors.NotLeader:
            continue
        except errors.StoreUnavailable as e:
            metrics.retention_sweeps.labels(result="failed").inc()
            logger.warning("Retention sweep failed, the next one retries: %s", e)
            continue
        metrics.retention_sweeps.labels(result="done").inc()
        metrics.retention_swept.inc(done.removed)
        if done.removed:
            logger.info(
                "Retention sweep removed the records of %d executions (%d kept: cleanup unfinished).",
                done.removed,
                done.kept,
            )
