"""A queue of keys in which a key is never handed to two workers at once.

The controller-runtime work queue's rules, in asyncio: a key added while it waits is not added
twice; a key added while a worker has it is marked and queued again when that worker is done,
so the change that came in is acted on by a later step, never by a second one at the same time.

Keys come at two priorities. What a watch saw (a new Execution, a change, a worker Pod that
ended) is added at once and is handed out first; the resync's sweep over everything in flight is
added ``later`` and is handed out only while nothing added at once waits. A sweep of thousands
of keys therefore never delays a new Execution's first step, and a key that is waiting later
and is then added at once moves ahead.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class KeyedQueue(Generic[Key]):
    def __init__(self) -> None:
        #: Keys waiting, at once and later; a key moved ahead stays behind in ``_later`` too,
        #: and is skipped there (only keys in ``_queued`` are live).
        self._now: collections.deque[Key] = collections.deque()
        self._later: collections.deque[Key] = collections.deque()
        self._queued: dict[Key, bool] = {}  # key -> added at once
        #: One release per key in ``_queued``: a worker waits on it for the next key.
        self._available = asyncio.Semaphore(0)
        self._active: set[Key] = set()
        self._again: dict[Key, bool] = {}

    def add(self, key: Key, *, later: bool = False) -> None:
        """Queue ``key`` for a step (once, however often it is added before a worker takes it);
        ``later``: behind every key added at once (the resync's sweep)."""
        if key in self._active:
            self._again[key] = self._again.get(key, False) or not later
            return
        queued = self._queued.get(key)
        if queued is None:
            self._queued[key] = not later
            (self._later if later else self._now).append(key)
            self._available.release()
        elif not queued and not later:  # Waiting later, now wanted at once: move it ahead.
            self._queued[key] = True
            self._now.append(key)

    async def get(self) -> Key:
        """The next key; the caller must call :meth:`done` with it when its step is over."""
        await self._available.acquire()
        key = self._next(self._now, urgent=True)
        if key is None:
            key = self._next(self._later, urgent=False)
        assert key is not None  # One release per key waiting.
        del self._queued[key]
        self._active.add(key)
        return key

    def _next(self, waiting: collections.deque[Key], *, urgent: bool) -> Key | None:
        while waiting:
            key = waiting.popleft()
            if self._queued.get(key) is urgent:
                return key
        return None

    def done(self, key: Key) -> None:
        """The step of ``key`` is over; if it was added meanwhile, it is queued again."""
        self._active.discard(key)
        urgent = self._again.pop(key, None)
        if urgent is not None:
            self.add(key, later=not urgent)

    def __len__(self) -> int:
        """Keys waiting for a worker."""
        return len(self._queued)

    @property
    def active(self) -> int:
        """Keys a worker has now."""
        return len(self._active)
