"""The Event ``records forget`` leaves: who asked to remove which records, on the object they
were about.

Removing an execution's records destroys evidence, so ``records forget`` says so where the
people who own the swarm look (``kubectl describe``/``kubectl get events``) before it removes
anything: on the Execution when one of that name still exists, else on the Swarm (a reference by
name when the Swarm is gone too: an Event may name an object that no longer exists). Who asked is
what the person gave ``--requested-by``: a process inside a Pod cannot learn who ran
``kubectl exec``; the API server's audit log records that.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Final

from agentihooks_swarm import resources
from agentihooks_swarm.kubernetes import custom, posting

REASON: Final = "RecordsForgotten"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Forgotten:
    """What is forgotten, and who asked."""

    namespace: str
    slug: str
    execution: str
    requested_by: str
    force: bool

    def message(self) -> str:
        forced = " with --force (the checks were skipped)" if self.force else ""
        return (
            f"records forget of execution {self.execution!r} of swarm {self.slug!r}{forced}, requested by "
            f"{self.requested_by!r} (as given to --requested-by; the API server's audit log records who "
            "ran kubectl exec): its stored records are removed and its name is free"
        )


async def leave_event(
    *,
    forgotten: Forgotten,
    executions: custom.CustomClient,
    swarms: custom.CustomClient,
    events: posting.EventClient,
    component: str,
) -> str:
    """Post the Warning ``RecordsForgotten`` Event; the object it is about, as ``Kind/ns/name``.

    Raises :class:`agentihooks_swarm.errors.ApiError` when the API server does not take it.
    """
    api_version = f"{resources.GROUP}/{resources.VERSION}"
    involved: dict[str, str] = {"apiVersion": api_version, "namespace": forgotten.namespace}
    execution = await executions.read(namespace=forgotten.namespace, name=forgotten.execution)
    if execution is not None:
        involved.update(kind="Execution", name=forgotten.execution)
        found = execution
    else:
        involved.update(kind="Swarm", name=forgotten.slug)
        found = await swarms.read(namespace=forgotten.namespace, name=forgotten.slug) or {}
    uid = (found.get("metadata") or {}).get("uid")
    if uid:
        involved["uid"] = str(uid)
    await events.post(
        involved=involved,
        type_="Warning",
        reason=REASON,
        message=forgotten.message(),
        component=component,
        instance=socket.gethostname(),
    )
    return f"{involved['kind']}/{forgotten.namespace}/{involved['name']}"
