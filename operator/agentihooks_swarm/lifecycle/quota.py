"""A swarm's byte quota, as a launch reads it: so that one swarm cannot fill Redis for the others.

Redis runs ``noeviction``: once full, it refuses every write, and every swarm's refused Pods are
kept for want of a place for their captures. So each swarm gets a bound on the bytes its keys take
(``SWARM_QUOTA_BYTES``, measured by :func:`storage.quota.stored_bytes`); at it, a new Execution of
that swarm is not launched: it waits in phase ``Blocked`` (reason ``QuotaExceeded``), and launches
at a later step once retention or ``records forget`` has brought the swarm back under. Only
launches wait: a capture is never skipped, nor a refused Pod deleted without one, because of the
quota; the workers already running are captured and cleaned up as always.

A measure walks every entry of the swarm's keys, so a launch reads one taken within
:data:`MAX_AGE` seconds (a burst of Executions, or the Blocked ones at each resync, measures once);
the leader also measures every known swarm at each interval (:meth:`Quota.run`), which keeps the
metrics current for the alert as a swarm fills.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from agentihooks_swarm import errors, metrics as metrics_
from agentihooks_swarm.lifecycle import events, status as status_
from agentihooks_swarm.storage import connection, quota as stored

logger = logging.getLogger(__name__)

#: Seconds a measure of a swarm is used for before it is taken again.
MAX_AGE: Final = 5.0
#: Seconds between the leader's rounds over every swarm: the metrics need no fresher figure, and a
#: round walks every entry of every swarm.
INTERVAL: Final = 60.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reached:
    """A swarm at or over its quota: what it takes and its bound, in bytes."""

    used: int
    bound: int


@dataclasses.dataclass(kw_only=True)
class Quota:
    """The swarms' byte quota and their last measures (one entry per swarm measured)."""

    store: connection.Connection
    metrics: metrics_.Metrics
    #: Bytes; 0 measures (for the metrics) but holds nothing back.
    bound: int
    clock: Callable[[], float] = time.monotonic
    _measured: dict[str, tuple[float, int]] = dataclasses.field(default_factory=dict, init=False)
    #: The last round's failure, said once at warning level (a Redis that refuses MEMORY refuses
    #: it every round).
    _failed: str = dataclasses.field(default="", init=False)

    async def used(self, *, slug: str, fresh: bool = False) -> int:
        """The bytes ``slug``'s keys take: a measure younger than :data:`MAX_AGE` unless ``fresh``.
        Raises :class:`errors.StoreUnavailable`."""
        now = self.clock()
        last = self._measured.get(slug)
        if last is not None and not fresh and now - last[0] < MAX_AGE:
            return last[1]
        used = await stored.stored_bytes(self.store, slug=slug)
        self._measured[slug] = (now, used)
        self.metrics.stored_bytes.labels(swarm=slug).set(used)
        self.metrics.quota_bytes.labels(swarm=slug).set(self.bound)
        return used

    async def reached(self, *, slug: str) -> Reached | None:
        """Whether ``slug`` is at its quota (a new Execution of it waits); None with no quota.
        Raises :class:`errors.StoreUnavailable`."""
        if self.bound <= 0:
            return None
        used = await self.used(slug=slug)
        return Reached(used=used, bound=self.bound) if used >= self.bound else None

    async def at_bound(self, *, slug: str) -> Reached | None:
        """Whether a new Execution of ``slug`` waits (:meth:`hold` answers it): :meth:`reached`, or
        None when the swarm cannot be measured. That one launches, as one over a budget that cannot
        be read does: the quota guards Redis's room, and the launch's own writes say if Redis is
        gone."""
        try:
            return await self.reached(slug=slug)
        except errors.StoreUnavailable as e:
            logger.warning("Could not measure the bytes of swarm %s; launching: %s", slug, e)
            return None

    def hold(
        self, *, slug: str, reached: Reached, status: Mapping[str, Any], notes: events.Collected
    ) -> status_.Answer:
        """The answer of an Execution of ``slug`` held back at its quota (a Warning Event, and the
        metric, the first time it is held back)."""
        answer = status_.quota_exceeded(swarm=slug, used=reached.used, bound=reached.bound)
        if not status_.launched_reason(status, status_.QUOTA_EXCEEDED):
            notes.warning(reason=status_.QUOTA_EXCEEDED, message=answer.conditions[0]["message"])
            self.metrics.quota_blocked.labels(swarm=slug).inc()
        return answer

    def known(self) -> list[str]:
        """The swarms measured so far."""
        return sorted(self._measured)

    async def run(
        self,
        *,
        swarms: Callable[[], Awaitable[list[str]]],
        holds: Callable[[], bool],
        interval: float = INTERVAL,
    ) -> None:
        """Measure every swarm with records (``swarms``) and every one measured before, each
        ``interval`` seconds while leading (a supervised task, forever)."""
        while True:
            if holds():
                await self.measure_all(swarms=swarms)
            await asyncio.sleep(interval)

    async def measure_all(self, *, swarms: Callable[[], Awaitable[list[str]]]) -> None:
        """One round of :meth:`run`; one that fails (Redis, or a Redis that refuses ``MEMORY``) is
        logged, and the next round tries again."""
        try:
            for slug in sorted({*await swarms(), *self.known()}):
                await self.used(slug=slug, fresh=True)
        except errors.StoreUnavailable as e:
            level = logging.DEBUG if str(e) == self._failed else logging.WARNING
            self._failed = str(e)
            logger.log(level, "Could not measure the swarms' bytes in Redis, the next round retries: %s", e)
            return
        self._failed = ""
