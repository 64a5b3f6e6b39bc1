"""A queue of keys in which a key is never handed to two workers at once.

The controller-runtime work queue's rules, in asyncio: a key added while it waits is not added
twice; a key added while a worker has it is marked and queued again when that worker is done,
so the change that came in is acted on by a later step, never by a second one at the same time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class KeyedQueue(Generic[Key]):
    def __init__(self) -> None:
        self._waiting: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._again: set[Key] = set()

    def add(self, key: Key) -> None:
        """Queue ``key`` for a step (once, however often it is added before a worker takes it)."""
        if key in self._active:
            self._again.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._waiting.put_nowait(key)

    async def get(self) -> Key:
        """The next key; the caller must call :meth:`done` with it when its step is over."""
        key = await self._waiting.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Key) -> None:
        """The step of ``key`` is over; if it was added meanwhile, it is queued again."""
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def __len__(self) -> int:
        """Keys waiting for a worker."""
        return len(self._queued)

    @property
    def active(self) -> int:
        """Keys a worker has now."""
        return len(self._active)
