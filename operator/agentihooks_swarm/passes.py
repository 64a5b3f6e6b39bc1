"""The controller's passes over the Executions in flight.

Memory follows the work in flight, not the history. A kopf timer per Execution made kopf keep,
for every Execution that ever existed, its latest full body and a task (``make bench`` measured
about 40 MiB per 1,000 Executions, Done ones included). Instead kopf watches only Executions that
are not Done (a server-side field selector, see :mod:`agentihooks_swarm.finished`), the
operator's own watch of the Executions (:class:`finished.Watcher`) feeds :class:`InFlight` (per
Execution: its name, UID, swarm, cancel flag and its status, nothing else of the body), and one task,
:func:`run_passes`, visits each of them every ``CLEANUP_INTERVAL_SECONDS`` (:func:`visit`:
``attempts.advance``, then the status as one merge patch, then the Events).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

from agentihooks_swarm import (
    attempts,
    cleanup,
    errors,
    events,
    launch,
    leadership,
    records,
    status as status_,
    store as store_,
)

logger = logging.getLogger(__name__)

GROUP: Final = "swarm.agentihooks.io"
VERSION: Final = "v1alpha1"
#: Phases after which an Execution needs no more passes.
FINISHED: Final = frozenset({"Done", "Invalid"})


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def finished(body: Mapping[str, Any]) -> bool:
    """Done or Invalid, and not being deleted (a deletion still has its delete handler to run)."""
    metadata = _mapping(body.get("metadata"))
    return _mapping(body.get("status")).get("phase") in FINISHED and not metadata.get("deletionTimestamp")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tracked:
    """One Execution in flight: what a pass needs, and nothing else of its body."""

    namespace: str
    name: str
    uid: str
    swarm: str
    cancel: bool
    status: Mapping[str, Any]

    @property
    def generation(self) -> int:
        return int(self.status.get("attempt") or 1)

    def hand(self) -> records.HandResult | None:
        """The hand result the create handler wrote, or None before the launch finished."""
        stored = self.status.get("hand")
        if not isinstance(stored, Mapping) or not self.status.get("pod"):
            return None
        return records.HandResult(
            generation=self.generation,
            handed=bool(stored.get("handed")),
            reason=stored.get("reason"),
            removed=stored.get("removed"),
            pod=str(self.status["pod"]),
        )

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Execution",
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }


def track(body: Mapping[str, Any]) -> Tracked | None:
    """The pass's view of an Execution in flight; None when it needs no pass (yet, or any more)."""
    metadata = _mapping(body.get("metadata"))
    status = _mapping(body.get("status"))
    spec = _mapping(body.get("spec"))
    if finished(body) or metadata.get("deletionTimestamp") or not status.get("hand"):
        return None
    return Tracked(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        swarm=str(spec.get("swarm") or ""),
        cancel=bool(spec.get("cancel")),
        # The status' own fields only (not kopf's bookkeeping in it): nothing else of the body stays.
        status={k: v for k, v in status.items() if k != "kopf"},
    )


class InFlight:
    """The Executions in flight, by UID; fed by every watch event of every Execution."""

    def __init__(self) -> None:
        self._items: dict[str, Tracked] = {}

    def observe(self, *, event: str | None, body: Mapping[str, Any]) -> None:
        uid = str(_mapping(body.get("metadata")).get("uid") or "")
        tracked = None if event == "DELETED" else track(body)
        if tracked is None:
            self._items.pop(uid, None)
        else:
            self._items[uid] = tracked

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        return iter(list(self._items.values()))


async def visit(
    *,
    tracked: Tracked,
    runtime: launch.Runtime,
    store: store_.AsyncStore,
    guard: leadership.Guard,
    deadline_seconds: float,
) -> Mapping[str, Any] | None:
    """One pass over one attempt in flight; its status written as one merge patch when it changed.

    Returns the Execution as the API server has it after the patch (None when nothing was written,
    or the Execution is gone). A failed pass is logged and shown in the status; the next pass retries.
    """
    hand = tracked.hand()
    if hand is None:
        return None
    attempt = launch.Attempt(
        namespace=tracked.namespace, slug=tracked.swarm, execution=tracked.name, generation=tracked.generation
    )
    notify = events.Collected()
    patch: dict[str, Any] = {}
    try:
        progress = await attempts.advance(
            runtime=runtime,
            store=store,
            guard=guard,
            attempt=attempt,
            hand=hand,
            cancelled=tracked.cancel,
            deadline_seconds=deadline_seconds,
            notify=notify,
        )
    except leadership.NotLeader:
        return None
    except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable) as e:
        count_failure(runtime, e)
        logger.warning(
            "Cleanup pass of %s/%s failed, the next pass retries: %s", attempt.namespace, attempt.execution, e
        )
        status_.failed(patch, tracked.status, e)
    else:
        status_.progress(patch, tracked.status, progress)
    await _post(runtime=runtime, tracked=tracked, notify=notify)
    if not patch:
        return None
    try:
        return await runtime.pods.patch_custom_status(
            namespace=tracked.namespace, plural="executions", name=tracked.name, status=patch
        )
    except errors.NotFound:
        return None
    except errors.ApiError as e:
        logger.warning("Could not write the status of %s/%s: %s", tracked.namespace, tracked.name, e)
        return None


def count_failure(runtime: launch.Runtime, error: Exception) -> None:
    """A failed pass in the operator's metrics (by error; Redis failures also by path)."""
    runtime.metrics.cleanup_failures.labels(error=type(error).__name__).inc()
    if isinstance(error, errors.StoreUnavailable):
        runtime.metrics.store_failures.labels(path="cleanup").inc()


async def _post(*, runtime: launch.Runtime, tracked: Tracked, notify: events.Collected) -> None:
    for type_, reason, message in notify.items:
        try:
            await runtime.pods.post_event(
                involved=tracked.reference(), type_=type_, reason=reason, message=message
            )
        except errors.ApiError as e:
            logger.warning(
                "Could not post the %s event of %s/%s: %s", reason, tracked.namespace, tracked.name, e
            )


async def run_passes(
    *,
    inflight: InFlight,
    interval: float,
    holds: Callable[[], bool],
    visit_one: Callable[[Tracked], Awaitable[Mapping[str, Any] | None]],
    workers: int,
) -> None:
    """Every ``interval`` seconds, one pass over every Execution in flight (while leading)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        due = list(inflight)
        if not due or not holds():
            continue
        began = loop.time()
        await _each(due, workers=workers, work=_observing(inflight, visit_one))
        logger.info("A pass over %d executions in flight done in %.1fs.", len(due), loop.time() - began)


def _observing(
    inflight: InFlight, visit_one: Callable[[Tracked], Awaitable[Mapping[str, Any] | None]]
) -> Callable[[Tracked], Awaitable[None]]:
    async def one(tracked: Tracked) -> None:
        try:
            after = await visit_one(tracked)
        except Exception:  # One Execution's surprise must not end the passes of all the others.
            logger.exception("A pass over %s/%s failed unexpectedly", tracked.namespace, tracked.name)
            return
        if after is not None:  # The watch brings the same, later: the next pass starts from it.
            inflight.observe(event="MODIFIED", body=after)

    return one


async def _each(
    items: Iterable[Tracked], *, workers: int, work: Callable[[Tracked], Awaitable[None]]
) -> None:
    """``work`` on each item, at most ``workers`` at once, without a task per item."""
    queue = iter(items)

    async def worker() -> None:
        for item in queue:
            await work(item)

    await asyncio.gather(*(worker() for _ in range(workers)))
