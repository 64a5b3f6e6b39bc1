"""A burst of refused worker Pods and launch removal over them, for the Redis topology tests.

:func:`plant` plants refused workers (Failed, exit 78, planted log) through kwok; :func:`remove`
runs the operator's real launch removal over them, a few at a time and paced, so that a fault
injected meanwhile (``kill -9`` of a Redis primary, a slot move) lands at any step of any removal;
:func:`lost` checks the invariant afterwards: every Pod that is gone has its capture in Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Sequence

from kubernetes_asyncio import client

from agentihooks_swarm.lifecycle import events, launch, model
from tests.support.cluster import ControlPlane
from tests.support.planting import plant_pod


@dataclasses.dataclass(frozen=True)
class Planted:
    attempt: model.Attempt
    uid: str


async def plant(
    api: client.ApiClient, cluster: ControlPlane, *, namespace: str, slug: str, prefix: str, count: int
) -> list[Planted]:
    gate = asyncio.Semaphore(6)

    async def one(index: int) -> Planted:
        # Unowned: only launch removal runs over them, which judges a Pod by its pinned UID.
        attempt = model.Attempt(
            namespace=namespace, slug=slug, execution=f"{prefix}-{index:03d}", generation=1, owner_uid=""
        )
        async with gate:
            pod = await plant_pod(api, cluster, attempt=attempt, exit_code=78, reason="Error")
        return Planted(attempt=attempt, uid=pod["metadata"]["uid"])

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def remove(
    runtime: model.Runtime,
    planted: Sequence[Planted],
    *,
    spacing: float = 0.1,
    done: Callable[[int], None] | None = None,
) -> dict[str, bool]:
    """Launch removal of every planted Pod, one started every ``spacing`` s; execution → removed."""
    results: dict[str, bool] = {}

    async def one(index: int, item: Planted) -> None:
        await asyncio.sleep(index * spacing)
        removal = await launch.remove_at_launch(
            runtime=runtime, attempt=item.attempt, uid=item.uid, notify=events.Collected()
        )
        results[item.attempt.execution] = removal.removed
        if done is not None:
            done(len(results))

    await asyncio.gather(*(one(i, item) for i, item in enumerate(planted)))
    return results


def lost(
    planted: Sequence[Planted], removed: dict[str, bool], *, read: Callable[[str], str | None]
) -> list[str]:
    """Executions whose Pod launch removal deleted (``removed: true``) without its capture in Redis.

    ``read(execution)`` returns the stored ``attempt-startup-diagnostics`` entry or None.
    """
    missing: list[str] = []
    for item in planted:
        if not removed.get(item.attempt.execution):
            continue
        raw = read(item.attempt.execution)
        record = json.loads(raw) if raw else {}
        codes = [c["terminated"].get("exitCode") for c in record.get("startup", {}).get("containers", [])]
        if record.get("uid") != item.uid or 78 not in codes:
            missing.append(item.attempt.execution)
    return missing
