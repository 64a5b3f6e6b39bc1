"""A queue of keys in which a key is never handed to two workers at once.

The controller-runtime work queue's rules, in asyncio: a key added while it waits is not added
twice; a key added while a worker has it is marked and queued again when that worker is done,
so the change that came in is acted on by a later step, never by a second one at the same time.

Keys come at three priorities (:class:`Priority`), each handed out only while nothing more urgent
waits. ``EVIDENCE``: a worker Pod that may have ended (its evidence may be waiting: a capture is
never queued behind bookkeeping). ``NOW``: what else a watch saw (a new Execution, a change, a
Pod deleted). ``LATER``: the resync's sweep over everything in flight. A burst of thousands of new
Executions therefore never delays a refused worker's capture, a sweep never delays a new
Execution's first step, and a key that waits and is then added more urgently moves ahead.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class Priority(enum.IntEnum):
    """How soon a key is handed out: a lower value first."""

    EVIDENCE = 0
    NOW = 1
    LATER = 2


class KeyedQueue(Generic[Key]):
    def __init__(self) -> None:
        #: Keys waiting, one deque per priority; a key moved ahead stays behind in its old deque
        #: too, and is skipped there (only a key's place at its priority in ``_queued`` is live).
        self._waiting: dict[Priority, collections.deque[Key]] = {p: collections.deque() for p in Priority}
        self._queued: dict[Key, Priority] = {}
        #: One release per key in ``_queued``: a worker waits on it for the next key.
        self._available = asyncio.Semaphore(0)
        self._active: set[Key] = set()
        self._again: dict[Key, Priority] = {}

    def add(self, key: Key, *, priority: Priority = Priority.NOW) -> None:
        """Queue ``key`` for a step (once, however often it is added before a worker takes it),
        behind every key waiting at a more urgent ``priority``."""
        if key in self._active:
            self._again[key] = min(self._again.get(key, priority), priority)
            return
        queued = self._queued.get(key)
        if queued is None:
            self._queued[key] = priority
            self._waiting[priority].append(key)
            self._available.release()
        elif priority < queued:  # Waiting, now wanted sooner: move it ahead.
            self._queued[key] = priority
            self._waiting[priority].append(key)

    async def get(self) -> Key:
        """The next key; the caller must call :meth:`done` with it when its step is over."""
        await self._available.acquire()
        # One release per key waiting: some priority has a live key.
        key = next(k for k in (self._next(p) for p in Priority) if k is not None)
        del self._queued[key]
        self._active.add(key)
        return key

    def _next(self, priority: Priority) -> Key | None:
        waiting = self._waiting[priority]
        while waiting:
            key = waiting.popleft()
            if self._queued.get(key) is priority:
                return key
        return None

    def done(self, key: Key) -> None:
        """The step of ``key`` is over; if it was added meanwhile, it is queued again."""
        self._active.discard(key)
        priority = self._again.pop(key, None)
        if priority is not None:
            self.add(key, priority=priority)

    def __len__(self) -> int:
        """Keys waiting for a worker."""
        return len(self._queued)

    @property
    def active(self) -> int:
        """Keys a worker has now."""
        return len(self._active)
