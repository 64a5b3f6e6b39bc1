"""The kopf handlers, and nothing else: each reads its arguments, calls one function of the logic
modules, and says what happened.

Executions are not kopf's: their steps are the reconciler's (:mod:`controller.reconciler`,
:mod:`lifecycle.step`). kopf follows the Swarms, whose changes relaunch the Executions refused for
an older version of them.

Two ways in, one set of handlers:

* ``python -m agentihooks_swarm run`` registers them (:func:`register`) on a registry of its own
  and runs kopf in a thread of its own (:class:`kopf_adapter.Operator`); a handler hands its work
  to the operator's event loop, where the wiring's connections live;
* ``kopf run -m agentihooks_swarm.handlers`` (kopf's CLI hosts the operator, in kopf's loop): this
  module registers them on kopf's default registry when imported, with a start-up handler that
  starts the same operator (:func:`serving.running`, with the settings from the environment:
  set ``AGENTIHOOKS_SWARM_NAMESPACES`` to the namespaces you give kopf), a clean-up handler that
  stops it, and a probe for kopf's ``--liveness`` endpoint that fails once a task was given up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import kopf

from agentihooks_swarm import errors, resources, serving, settings as settings_
from agentihooks_swarm.lifecycle import status as status_
from agentihooks_swarm.swarm import relaunch

logger = logging.getLogger(__name__)

T = TypeVar("T")


def register(
    registry: kopf.OperatorRegistry | None, *, running: Callable[[Any], serving.Running]
) -> kopf.OperatorRegistry:
    """Add the operator's handlers to ``registry`` (None: kopf's default one); ``running(memo)``
    finds the running operator they act on."""
    seen: dict[str, str] = {}

    async def on_loop(now: serving.Running, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, now.loop))

    @kopf.on.event(resources.GROUP, resources.VERSION, "swarms", registry=registry)
    async def swarm_changed(
        type: str | None, body: Any, namespace: str | None, memo: Any, logger: kopf.Logger, **_: Any
    ) -> None:
        """A Swarm that changed relaunches the Executions whose Pod was refused for its older version.

        An event handler keeps no bookkeeping on the Swarm; the Executions' ``rejectedWith`` stamp
        makes a repeated event (or the listing at startup) a no-op.
        """
        now = running(memo)
        if type == "DELETED" or namespace is None or not now.app.leader.holds():
            return
        key, stamp = f"{namespace}/{body.get('metadata', {}).get('name')}", status_.swarm_stamp(body)
        if seen.get(key) == stamp:  # Not a new version of its spec: nothing to relaunch for.
            return
        try:
            nudged = await on_loop(
                now,
                relaunch.after_swarm_change(
                    executions=now.app.cluster.executions, namespace=namespace, swarm=dict(body)
                ),
            )
        except errors.ApiError as e:  # The next event, or a restart's listing, tries again.
            logger.warning("Could not relaunch the Executions refused for an older Swarm: %s", e)
            return
        seen[key] = stamp
        if nudged:
            logger.info("Swarm changed; launching again: %s.", ", ".join(nudged))

    return registry if registry is not None else kopf.get_default_registry()


# --- kopf run -m agentihooks_swarm.handlers ----------------------------------------------------------


def _hosted(memo: Any) -> serving.Running:
    hosted: serving.Running = memo["running"]
    return hosted


register(None, running=_hosted)


@kopf.on.startup()
async def start_hosted(memo: kopf.Memo, **_: Any) -> None:
    """kopf's CLI hosts the operator: start it in kopf's loop, for as long as kopf runs."""
    stack = contextlib.AsyncExitStack()

    def give_up(name: str) -> None:  # kopf stops on SIGTERM, as the kubelet would send it.
        os.kill(os.getpid(), signal.SIGTERM)

    memo["running"] = await stack.enter_async_context(
        serving.running(settings=settings_.Settings.from_env(), probes=None, on_give_up=give_up)
    )
    memo["stack"] = stack


@kopf.on.cleanup()
async def stop_hosted(memo: kopf.Memo, **_: Any) -> None:
    stack: contextlib.AsyncExitStack | None = memo.get("stack")
    if stack is not None:
        await stack.aclose()


@kopf.on.probe(id="tasks")
def tasks_healthy(memo: kopf.Memo, **_: Any) -> str:
    """kopf's ``--liveness`` endpoint answers 500 once the supervisor gave a task up."""
    problems = _hosted(memo).app.problems()
    if problems:
        raise kopf.PermanentError(f"a background task could not keep running: {problems}")
    return "running"
