"""Every background task of the operator runs under one supervisor.

A task is a :class:`Runnable`: a name and a coroutine function meant to run until it is stopped.
If it raises (or returns), the supervisor logs the exception with its traceback, counts it
(``agentihooks_swarm_task_restarts_total{task}``; the gauge ``agentihooks_swarm_task_up{task}``
is 0 meanwhile) and starts it again after a backoff that doubles with each failure in a row. A
run that lasted ``stable_seconds`` resets the count. A task that fails ``give_up_after`` times in
a row cannot keep running: the supervisor gives up, ``/healthz`` answers 500 naming it, and
``on_give_up`` stops the operator, so Kubernetes restarts the Pod (a fresh process, fresh state)
rather than leaving a replica that looks alive and cleans nothing up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from agentihooks_swarm import metrics as metrics_

logger = logging.getLogger(__name__)

#: The first wait before a failed task runs again, and the longest.
BACKOFF_SECONDS: Final = 1.0
BACKOFF_CAP_SECONDS: Final = 60.0
#: Failures in a row after which a task is given up (the operator stops).
GIVE_UP_AFTER: Final = 6
#: A run at least this long was a good one: the next failure counts from 1 again.
STABLE_SECONDS: Final = 120.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runnable:
    name: str
    run: Callable[[], Awaitable[None]]


class Supervisor:
    def __init__(
        self,
        *,
        metrics: metrics_.Metrics,
        on_give_up: Callable[[str], None] = lambda name: None,
        backoff_seconds: float = BACKOFF_SECONDS,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
        give_up_after: int = GIVE_UP_AFTER,
        stable_seconds: float = STABLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.on_give_up = on_give_up
        self.backoff_seconds = backoff_seconds
        self.backoff_cap_seconds = backoff_cap_seconds
        self.give_up_after = give_up_after
        self.stable_seconds = stable_seconds
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        #: Failures of each task so far (all of them, not only those in a row).
        self.failures: dict[str, int] = {}
        #: The task given up, if one was.
        self.given_up: str | None = None
        self._up: dict[str, bool] = {}
        self._stopping = False

    @property
    def healthy(self) -> bool:
        return self.given_up is None

    def start(self, runnable: Runnable) -> None:
        """Run ``runnable`` under supervision from now on."""
        if runnable.name in self._tasks:
            raise ValueError(f"a task named {runnable.name!r} is supervised already")
        self.failures.setdefault(runnable.name, 0)
        self._tasks[runnable.name] = asyncio.create_task(
            self._keep(runnable), name=f"supervised {runnable.name}"
        )

    async def stop(self) -> None:
        """Stop every task (cancelled, then awaited)."""
        self._stopping = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._stopping = False

    def running(self) -> dict[str, bool]:
        """Each task's name and whether it is running now (not waiting to restart, not given up)."""
        return {name: self._up.get(name, False) for name in self._tasks}

    def _set_up(self, name: str, value: bool) -> None:
        self._up[name] = value
        self.metrics.task_up.labels(task=name).set(1 if value else 0)

    async def _keep(self, runnable: Runnable) -> None:
        in_a_row = 0
        while True:
            began = self._clock()
            self._set_up(runnable.name, True)
            try:
                await runnable.run()
            except asyncio.CancelledError:  # Stopped, not failed: its gauge keeps saying it ran.
                raise
            except Exception as e:
                error: BaseException = e
            else:
                if self._stopping:
                    self._set_up(runnable.name, False)
                    return
                error = RuntimeError(f"task {runnable.name} returned; it must run until it is stopped")
            self._set_up(runnable.name, False)
            self.failures[runnable.name] += 1
            self.metrics.task_restarts.labels(task=runnable.name).inc()
            in_a_row = 1 if self._clock() - began >= self.stable_seconds else in_a_row + 1
            if in_a_row >= self.give_up_after:
                self.given_up = runnable.name
                logger.critical(
                    "Task %s failed %d times in a row; the operator stops (its Pod is restarted).",
                    runnable.name,
                    in_a_row,
                    exc_info=error,
                )
                self.on_give_up(runnable.name)
                return
            delay = min(self.backoff_seconds * 2 ** (in_a_row - 1), self.backoff_cap_seconds)
            logger.error(
                "Task %s failed unexpectedly (%d in a row); it starts again in %.1fs.",
                runnable.name,
                in_a_row,
                delay,
                exc_info=error,
            )
            await asyncio.sleep(delay)
