"""The kopf handlers, and nothing else: each reads its arguments, calls one function of the logic
modules, and says what happened. Registered on the registry the operator's ``run`` hands to kopf
(:func:`register`), with the operator's wiring (:class:`app.App`) passed in, not read from kopf's
memo. kopf runs in a thread of its own (:class:`kopf_adapter.Operator`): a handler hands its work
to the operator's event loop, where the wiring's connections live.

Executions are not kopf's: their lifecycle is the reconciler's (:mod:`lifecycle`). kopf follows the
Swarms, whose changes relaunch the Executions refused for an older version of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

import kopf

from agentihooks_swarm import app as app_, errors, launch, resources, status as status_

logger = logging.getLogger(__name__)


T = TypeVar("T")


def register(
    registry: kopf.OperatorRegistry, *, app: app_.App, loop: asyncio.AbstractEventLoop
) -> kopf.OperatorRegistry:
    """Add the operator's handlers to ``registry``; they act on ``app``'s collaborators in ``loop``."""
    seen: dict[str, str] = {}

    async def on_app_loop(work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))

    @kopf.on.event(resources.GROUP, resources.VERSION, "swarms", registry=registry)
    async def swarm_changed(
        type: str | None, body: Any, namespace: str | None, logger: kopf.Logger, **_: Any
    ) -> None:
        """A Swarm that changed relaunches the Executions whose Pod was refused for its older version.

        An event handler keeps no bookkeeping on the Swarm; the Executions' ``rejectedWith`` stamp
        makes a repeated event (or the listing at startup) a no-op.
        """
        if type == "DELETED" or namespace is None or not app.leader.holds():
            return
        key, stamp = f"{namespace}/{body.get('metadata', {}).get('name')}", status_.swarm_stamp(body)
        if seen.get(key) == stamp:  # Not a new version of its spec: nothing to relaunch for.
            return
        try:
            nudged = await on_app_loop(
                launch.relaunch_after_swarm_change(client=app.pods, namespace=namespace, swarm=dict(body))
            )
        except errors.ApiError as e:  # The next event, or a restart's listing, tries again.
            logger.warning("Could not relaunch the Executions refused for an older Swarm: %s", e)
            return
        seen[key] = stamp
        if nudged:
            logger.info("Swarm changed; launching again: %s.", ", ".join(nudged))

    return registry
