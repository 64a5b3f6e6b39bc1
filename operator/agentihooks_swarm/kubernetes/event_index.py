"""The Pods' Events, listed once and then watched for the whole operator, held by Pod UID.

A capture keeps the refused Pod's own Events. Listed per Pod (``PodClient.pod_events``, a field
selector on ``involvedObject.uid``), each read makes the API server take every Event of the
namespace from etcd and filter them: no index serves that selector, and the API server keeps no
watch cache for Events by default. At scale each capture then costs as much as the namespace has
Events (``docs/benchmarks.md``). :class:`EventIndex` lists the Pods' Events once
(``involvedObject.kind=Pod``), then follows a watch from that list, and keeps for each Pod UID the
fields a capture keeps (:func:`slim`).

A capture reads the index (:class:`IndexedReader`) only while it is in sync: after its list,
while its watch runs, and for a Pod it has not dropped. Otherwise — before the first list, from a
failed or refused watch until the next list, a Pod whose entry was dropped — the capture lists
that Pod's Events as before. So the index changes what a capture costs, never what it may hold.
As with any watch, an Event written in the last moments before a capture may not have arrived
yet; Events are best-effort in Kubernetes too (a kubelet batches and rate-limits its own).

Memory: an Event leaves when the API server deletes it (its TTL, one hour by default); a Pod's
entry leaves when none of its Events changed for ``keep_seconds``, and when more than
``max_events`` are held the least recently changed Pods leave first. A Pod that left is
remembered (its UID only), and its captures list its Events again. That memory is bounded too:
once it has forgotten a UID, the table can no longer tell a Pod without Events from a forgotten
one, so every Pod it holds nothing for is listed, until the index lists again (at the end of its
current watch request) and starts whole.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from agentihooks_swarm import metrics as metrics_
from agentihooks_swarm.kubernetes import informer as informer_, logs, pods

logger = logging.getLogger(__name__)

#: Events listed per request when the index (re)lists.
PAGE: Final = 500
#: A Pod's entry is dropped when none of its Events changed for this long (the API server's own
#: Event TTL is one hour by default, so by then it has dropped them too).
KEEP_SECONDS: Final = 3600.0
#: The most Events held (about 500 bytes each with their Pod's entry, so at most about 10 MiB);
#: beyond it the least recently changed Pods are dropped, and their captures list.
MAX_EVENTS: Final = 20_000
#: Dropped Pods' UIDs remembered (their captures list again), about 120 bytes each.
MAX_DROPPED: Final = 20_000
#: The longest Event message held (the capture keeps at most this much of it too).
MESSAGE_MAX: Final = 1024
#: The longest of an Event's other words held (``diagnostics.EVENT_FIELD_MAX`` too).
WORD_MAX: Final = 253

Object = dict[str, Any]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def slim(event: Mapping[str, Any]) -> Object:
    """The fields of an Event that a capture reads (``diagnostics.fit_events``), and no others."""
    kept: Object = {"count": event["count"]} if event.get("count") is not None else {}
    # Words cut as a capture cuts them, so one Event written to be large is not held whole.
    for key in (
        "type",
        "reason",
        "firstTimestamp",
        "lastTimestamp",
        "eventTime",
        "reportingComponent",
        "reportingController",
        "reportingInstance",
    ):
        value = event.get(key)
        if isinstance(value, str):
            kept[key] = value[:WORD_MAX]
    source = _mapping(event.get("source"))
    if source:
        kept["source"] = {
            k: source[k][:WORD_MAX] for k in ("component", "host") if isinstance(source.get(k), str)
        }
    message = event.get("message")
    if isinstance(message, str):
        kept["message"] = message[:MESSAGE_MAX]
    series = _mapping(event.get("series"))
    if series:
        kept["series"] = {k: series[k] for k in ("count", "lastObservedTime") if k in series}
    metadata = _mapping(event.get("metadata"))
    kept["metadata"] = {
        k: metadata[k] for k in ("resourceVersion", "creationTimestamp") if metadata.get(k) is not None
    }
    return kept


@dataclasses.dataclass
class _Pod:
    #: Each Event's :func:`slim` form as compact JSON, by the Event's UID: about 250 bytes an
    #: Event held, a third of what the decoded dict takes (a capture decodes the few it reads).
    events: dict[str, bytes]
    changed: float


class Table:
    """The held Events by Pod UID (pure: no I/O; the clock is passed in)."""

    def __init__(
        self,
        *,
        keep_seconds: float = KEEP_SECONDS,
        max_events: int = MAX_EVENTS,
        max_dropped: int = MAX_DROPPED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keep_seconds = keep_seconds
        self.max_events = max_events
        self.max_dropped = max_dropped
        self._clock = clock
        self._pods: collections.OrderedDict[str, _Pod] = collections.OrderedDict()  # oldest change first
        self._dropped: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._size = 0
        #: Whether a dropped Pod's UID was forgotten since the last ``clear``.
        self._forgot = False

    def __len__(self) -> int:
        """The Events held."""
        return self._size

    @property
    def pods(self) -> int:
        return len(self._pods)

    @property
    def whole(self) -> bool:
        """Whether a Pod the table holds nothing for has no Events (no dropped UID was forgotten)."""
        return not self._forgot

    def clear(self) -> None:
        """Before a new list: it brings every Event there is, so no Pod needs remembering."""
        self._pods.clear()
        self._dropped.clear()
        self._size = 0
        self._forgot = False

    def apply(self, *, kind: str | None, event: Mapping[str, Any]) -> None:
        """One listed Event (``kind`` None) or watch event (ADDED, MODIFIED, DELETED)."""
        involved = _mapping(event.get("involvedObject"))
        pod_uid = str(involved.get("uid") or "")
        event_uid = str(_mapping(event.get("metadata")).get("uid") or "")
        if not pod_uid or not event_uid or pod_uid in self._dropped:
            return
        now = self._clock()
        entry = self._pods.get(pod_uid)
        if kind == "DELETED":
            if entry is not None and entry.events.pop(event_uid, None) is not None:
                self._size -= 1
                if not entry.events:
                    del self._pods[pod_uid]
            return
        if entry is None:
            entry = self._pods[pod_uid] = _Pod(events={}, changed=now)
        if event_uid not in entry.events:
            self._size += 1
        entry.events[event_uid] = json.dumps(slim(event), separators=(",", ":")).encode()
        entry.changed = now
        self._pods.move_to_end(pod_uid)
        self._trim(now=now)

    def _trim(self, *, now: float) -> None:
        while self._pods:
            uid, oldest = next(iter(self._pods.items()))
            if self._size <= self.max_events and now - oldest.changed <= self.keep_seconds:
                return
            del self._pods[uid]
            self._size -= len(oldest.events)
            self._dropped[uid] = None
            while len(self._dropped) > self.max_dropped:
                self._dropped.popitem(last=False)
                self._forgot = True

    def events(self, uid: str) -> list[Object] | None:
        """The Pod's held Events (maybe none), or None when the table cannot tell: a Pod dropped
        from it, or one it holds nothing for once it has forgotten a dropped UID."""
        self._trim(now=self._clock())
        if uid in self._dropped:
            return None
        entry = self._pods.get(uid)
        if entry is not None:
            return [json.loads(raw) for raw in entry.events.values()]
        return [] if self.whole else None


@dataclasses.dataclass(kw_only=True)
class EventIndex:
    """The Pods' Events of the namespaces served (empty: every namespace), as its informer hands
    them over (:class:`informer.Handler`); read by captures through :class:`IndexedReader`."""

    namespaces: tuple[str, ...]
    table: Table = dataclasses.field(default_factory=Table)
    metrics: metrics_.Metrics | None = None
    #: Whether the table holds every Pod Event up to the watch's progress (its informer says).
    synced: bool = False

    def events(self, *, namespace: str, uid: str) -> list[Object] | None:
        """The Pod's Events from the table, or None when the capture must list them itself."""
        if not self.synced or (self.namespaces and namespace not in self.namespaces):
            return None
        return self.table.events(uid)

    def set_synced(self, value: bool) -> None:
        self.synced = value
        if self.metrics is not None:
            self.metrics.event_index_synced.set(1 if value else 0)

    # --- informer.Handler ---------------------------------------------------------------------

    def begin(self) -> None:
        self.table.clear()

    def apply(self, kind: str | None, body: Mapping[str, Any]) -> None:
        self.table.apply(kind=kind, event=body)

    def end(self) -> None:
        logger.info("Pod Events indexed: %d of %d Pods.", len(self.table), self.table.pods)

    def needs_relist(self) -> bool:
        """Once the table forgot a dropped Pod it cannot tell a Pod without Events from a
        forgotten one; a new list makes it whole again."""
        return not self.table.whole


def informer(*, client: pods.PodClient, index: EventIndex) -> informer_.Informer:
    """The informer that keeps ``index`` (its list and watch of every Pod's Events)."""
    return informer_.Informer(
        name="pod events",
        sources=[client.pod_events_listing(namespace=n) for n in index.namespaces or (None,)],
        handler=index,
        page=PAGE,
        on_sync=index.set_synced,
        refused_hint="grant list and watch on events; until then captures list each Pod's Events",
    )


class IndexedReader:
    """What a capture reads: logs from the API, a Pod's Events from the index while it is in sync."""

    def __init__(self, *, client: pods.PodClient, index: EventIndex) -> None:
        self._client = client
        self._index = index

    async def pod_logs(self, *, namespace: str, name: str, container: str) -> logs.LogRead:
        return await self._client.pod_logs(namespace=namespace, name=name, container=container)

    async def pod_events(self, *, namespace: str, uid: str) -> list[Object]:
        held = self._index.events(namespace=namespace, uid=uid)
        source = "index" if held is not None else "list"
        if self._index.metrics is not None:
            self._index.metrics.pod_events_reads.labels(source=source).inc()
        if held is not None:
            return held
        return await self._client.pod_events(namespace=namespace, uid=uid)
