"""A leader that has just taken the Lease, in-process: nothing tracked, its worker Pods' watch as
listed, and its orphan pass, which adopts an Execution that went while no operator watched (found
by its worker Pod or its journal entry, and Redis's owner claim for the name)."""

from __future__ import annotations

import dataclasses

from agentihooks_swarm.controller import executions, orphans, worker_pods
from agentihooks_swarm.lifecycle import model
from agentihooks_swarm.storage import operations


@dataclasses.dataclass
class NewLeader:
    table: executions.Executions
    """What it tracks: nothing yet."""
    workers: worker_pods.WorkerPods
    """Its worker Pods' watch (``begin``, ``apply`` each listed Pod, ``end``)."""
    woken: list[str] = dataclasses.field(default_factory=list)
    """The Executions (by UID) it woke, in order."""


def new_leader() -> NewLeader:
    table = executions.Executions(expiry=executions.Expiry(default_ttl=None))
    woken: list[str] = []
    return NewLeader(
        table=table, workers=worker_pods.WorkerPods(owners=table.named, wake=woken.append), woken=woken
    )


async def adopts_once(
    leader: NewLeader,
    *,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    uid: str,
    namespace: str,
    name: str,
    swarm: str,
) -> model.Tracked:
    """The leader's orphan pass adopts the one Execution ``uid`` (``namespace/name`` of ``swarm``,
    its first attempt), and only once: it is tracked as gone and being deleted, and woken."""
    found = orphans.Orphans(
        workers=leader.workers,
        table=leader.table,
        store=store,
        executions=runtime.cluster.executions,
        wake=leader.woken.append,
        metrics=runtime.metrics,
    )
    assert await found.adopt() == 1
    assert await found.adopt() == 0  # Judged once.
    assert leader.woken == [uid]
    tracked = leader.table.get(uid)
    assert tracked is not None and tracked.gone and tracked.deleting
    assert (tracked.namespace, tracked.name, tracked.swarm, tracked.attempt_number) == (
        namespace,
        name,
        swarm,
        1,
    )
    return tracked
