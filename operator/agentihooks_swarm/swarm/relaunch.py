"""A Swarm changed: its Executions refused for an older version of it get one launch more.

kopf's Swarm handler (:mod:`agentihooks_swarm.handlers`) calls :func:`after_swarm_change`; the
launch itself is the lifecycle's, woken by the annotation this writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from agentihooks_swarm.kubernetes import custom
from agentihooks_swarm.lifecycle import status


async def after_swarm_change(
    *, executions: custom.CustomClient, namespace: str, swarm: dict[str, Any]
) -> list[str]:
    """Annotate the Executions whose Pod was refused for an older version of ``swarm``.

    The annotation is a change the operator's watch sees, so each of them gets one launch with the
    new Swarm (:mod:`lifecycle.step`); an Execution refused for this very version is left alone.
    Returns the names of the Executions annotated.
    """
    name = (swarm.get("metadata") or {}).get("name")
    stamp = status.swarm_stamp(swarm)
    nudged = []
    async for execution in _invalid_executions(executions=executions, namespace=namespace):
        if (execution.get("spec") or {}).get("swarm") != name:
            continue
        if not status.stale_rejection(execution.get("status") or {}, swarm_stamp=stamp):
            continue
        metadata = execution.get("metadata") or {}
        if (metadata.get("annotations") or {}).get(status.RELAUNCH_ANNOTATION) == stamp:
            continue
        await executions.annotate(
            namespace=namespace,
            name=metadata["name"],
            annotations={status.RELAUNCH_ANNOTATION: stamp},
        )
        nudged.append(str(metadata["name"]))
    return nudged


#: Executions listed per page when a Swarm changes.
INVALID_PAGE: Final = 500


async def _invalid_executions(
    *, executions: custom.CustomClient, namespace: str
) -> AsyncIterator[dict[str, Any]]:
    """The namespace's Invalid Executions (the only ones a Swarm change may relaunch), page by page.

    Selected by the API server on ``status.phase`` (a selectable field of the CRD): a namespace
    with 20,000 Done Executions is not read whole on every Swarm change.
    """
    async for page in executions.list_pages(
        namespace=namespace,
        field_selector=f"status.phase={status.INVALID}",
        limit=INVALID_PAGE,
    ):
        for execution in page.get("items") or []:
            yield execution
