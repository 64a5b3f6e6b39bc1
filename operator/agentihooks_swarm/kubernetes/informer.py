"""List, then watch: the one way the operator follows a kind of object.

An :class:`Informer` lists its objects page by page, hands each to its :class:`Handler`, then
follows a watch from the list's ``resourceVersion``. What can happen to a watch is handled here,
once, for every user:

* the server ends a watch request after ``timeoutSeconds``: the next one goes on from the last
  version seen (bookmarks included), without a new list;
* ``410 Gone`` (as the watch request's answer or as an ``ERROR`` event in its stream) means the
  version is too old to go on from: the informer lists again at once;
* a refused, failed, timed-out or broken list or watch, or an answer that is not JSON: the
  informer is out of sync, says why once at warning level (then at info level until it is in
  sync again), waits (exponential backoff up to ``RETRY_CAP_SECONDS``) and lists again.

An informer of several namespaces has one source per namespace (the operator then never lists or
watches the whole cluster, so a Role in each namespace is all it needs): it lists them one after
the other as one list (its handler sees one ``begin`` and one ``end``), then watches them side by
side, each from its own list's version (versions are not comparable across watches). Whatever
makes one of them list again (410, an ``ERROR`` event, a failure) lists them all again: rare, and
the handler's view stays one whole list.

Anything else (a bug, or an answer of a shape nobody expected) is not caught here: it ends
:meth:`Informer.run`, and the operator's supervisor logs it, counts it and starts the informer
again. While it is not watching, :attr:`Informer.synced` is False, so a reader of its table can
tell a complete view from a partial one; :attr:`Informer.ready` is set once the first list has
been handed over whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from agentihooks_swarm import errors

logger = logging.getLogger(__name__)

#: How long one watch request lasts before it is made again (the API server ends it then).
WATCH_SECONDS: Final = 300
#: The first wait after a failed list or watch, and the longest.
RETRY_SECONDS: Final = 1.0
RETRY_CAP_SECONDS: Final = 30.0

Object = dict[str, Any]


class Handler(Protocol):
    """What an informer tells about its objects (no I/O: a table, and what it schedules)."""

    def begin(self) -> None:
        """A list starts: everything the handler holds may be stale until :meth:`end`."""

    def apply(self, kind: str | None, body: Mapping[str, Any]) -> None:
        """One listed object (``kind`` None) or watch event (``ADDED``, ``MODIFIED``, ``DELETED``)."""

    def end(self) -> None:
        """The list is over: every object that exists was handed to :meth:`apply` since :meth:`begin`."""

    def needs_relist(self) -> bool:
        """Asked after each watch request: whether the handler needs a new list to be whole."""


class Source(Protocol):
    """Where an informer lists and watches (:class:`transport.Listing` is one: a path and selectors)."""

    def pages(self, *, limit: int) -> AsyncIterator[Object]: ...

    def watching(
        self, *, version: str, seconds: int
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Object]]: ...


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclasses.dataclass(kw_only=True)
class Informer:
    name: str
    #: Where it lists and watches: one source (one namespace, or every namespace), or one per
    #: namespace served.
    sources: Sequence[Source]
    handler: Handler
    page: int = 500
    watch_seconds: int = WATCH_SECONDS
    retry_seconds: float = RETRY_SECONDS
    retry_cap_seconds: float = RETRY_CAP_SECONDS
    #: Whether the handler holds every object up to the watch's progress (listed, and watching).
    synced: bool = False
    #: Told True when the informer is in sync, False when it is not (a metric, a gauge).
    on_sync: Callable[[bool], None] | None = None
    #: Hint added to a refusal's message (what to grant).
    refused_hint: str = ""
    ready: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    #: The sources (by index) whose watch has opened since the last list.
    _watching: set[int] = dataclasses.field(default_factory=set)

    def _set_synced(self, value: bool) -> None:
        self.synced = value
        if self.on_sync is not None:
            self.on_sync(value)

    async def run(self) -> None:
        """List, then watch, until cancelled; see the module docstring for what is retried."""
        delay = self.retry_seconds
        warned = False
        try:
            while True:
                try:
                    versions = await self._list()
                    delay, warned = self.retry_seconds, False
                    await self._follow(versions)
                    continue  # 410 Gone, or the handler needs a list: list again at once.
                except errors.ApiError as e:
                    refused = isinstance(e, errors.ApiRefused) and self.refused_hint
                    problem = f"{e} ({self.refused_hint})" if refused else str(e)
                except ValueError as e:  # An answer that is not JSON.
                    problem = f"an unreadable answer: {errors.trim(str(e))}"
                self._set_synced(False)
                (logger.info if warned else logger.warning)(
                    "The watch of %s is out of sync; listing again in %.0fs: %s", self.name, delay, problem
                )
                warned = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_cap_seconds)
        finally:
            self._set_synced(False)

    async def _list(self) -> list[str]:
        """Every source listed, handed over as one list; the version each source's watch goes on from."""
        self._set_synced(False)
        self._watching.clear()
        self.handler.begin()
        versions = []
        count = 0
        for source in self.sources:
            version = ""
            async for page in source.pages(limit=self.page):
                for item in page.get("items") or []:
                    self.handler.apply(None, _mapping(item))
                    count += 1
                version = str(_mapping(page.get("metadata")).get("resourceVersion") or "")
                del page
            versions.append(version)
        self.handler.end()
        logger.info("Listed %d %s.", count, self.name)
        return versions

    async def _follow(self, versions: Sequence[str]) -> None:
        """Watch every source from its own version; return once one of them needs a new list, raise
        once one fails (the others stop either way)."""
        if len(versions) == 1:
            await self._follow_one(0, versions[0])
            return
        tasks = [
            asyncio.create_task(self._follow_one(index, version), name=f"watch {self.name} {index}")
            for index, version in enumerate(versions)
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            task.result()  # The first failure, raised as a single watch's would be.

    async def _follow_one(self, index: int, version: str) -> None:
        """One source's watch requests, one after the other, until it needs a new list."""
        while version:
            version = await self._watch(index, version)

    def _opened(self, index: int) -> None:
        self._watching.add(index)
        if len(self._watching) == len(self.sources):
            self._set_synced(True)
            self.ready.set()

    async def _watch(self, index: int, version: str) -> str:
        """Follow one watch request; the version to go on from, or '' to list again (410 Gone)."""
        try:
            async with self.sources[index].watching(version=version, seconds=self.watch_seconds) as stream:
                self._opened(index)
                async for change in stream:
                    kind, body = str(change.get("type")), _mapping(change.get("object"))
                    if kind == "ERROR":
                        self._set_synced(False)
                        message = body.get("message")
                        logger.info("The watch of %s ended (%s); listing again.", self.name, message)
                        return ""
                    version = str(_mapping(body.get("metadata")).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        self.handler.apply(kind, body)
            if self.handler.needs_relist():
                logger.info("The table of %s needs a new list to be whole; listing again.", self.name)
                return ""
        except errors.ApiRefused as e:
            if e.status == 410:
                logger.info("The watch of %s is too old to go on (410); listing again.", self.name)
                return ""
            raise
        return version
