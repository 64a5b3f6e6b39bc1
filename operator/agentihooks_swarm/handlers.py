"""The kopf decorators, and nothing else: each handler reads its arguments, calls one function
of the logic modules, writes the status, and translates this package's errors into
``kopf.TemporaryError`` / ``kopf.PermanentError``. Run with ``kopf run -m agentihooks_swarm.handlers``
(or ``python -m agentihooks_swarm run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from typing import Any

import kopf

from agentihooks_swarm import (
    attempts,
    cleanup,
    errors,
    events,
    launch,
    leadership,
    metrics,
    records,
    resources,
    retention,
    runtime,
    settings as settings_,
)
from agentihooks_swarm.store import AsyncStore

GROUP = resources.GROUP
VERSION = resources.VERSION
#: Read once, at import: kopf's decorators below need the cleanup interval.
CONFIG = settings_.Settings.from_env()
#: Launches and cleanup passes in progress at once; the others wait for a turn (``memo.gate``).
#: Unbounded, a burst of Executions (2000 at once in ``make bench``) queued thousands of requests
#: behind the API client's connection limit and Redis' connection pool: requests timed out while
#: still queued, Redis answered "Too many connections", the Lease renewal timed out too, and
#: every handler was retried (docs/benchmarks.md). A turn is waited for without a deadline.
CONCURRENCY = 32


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _condition(*, type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": _now(),
    }


def _set_condition(patch: kopf.Patch, current: Any, condition: dict[str, Any]) -> None:
    """Set one condition, keeping the others; an unchanged condition is not written again."""
    base = [c for c in (patch.status.get("conditions", current) or []) if isinstance(c, dict)]
    same = next((c for c in base if c.get("type") == condition["type"]), None)
    if same is not None and all(same.get(k) == condition[k] for k in ("status", "reason", "message")):
        return
    patch.status["conditions"] = [*(c for c in base if c.get("type") != condition["type"]), condition]


def _put(patch: kopf.Patch, status: Any, field: str, value: Any) -> None:
    """Write a status field only when it changes: a timer pass over a quiet attempt costs no PATCH."""
    if status.get(field) != value:
        patch.status[field] = value


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    config = CONFIG
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 32
    settings.watching.server_timeout = 300
    collector = metrics.Metrics()
    if config.metrics_port:
        collector.serve(port=config.metrics_port)
    stack = contextlib.AsyncExitStack()
    wired, store = await stack.enter_async_context(runtime.open_runtime(settings=config, collector=collector))
    memo.stack = stack
    memo.config = config
    memo.runtime = wired
    memo.store = store
    leader = leadership.Leadership(
        client=wired.pods,
        namespace=config.lease_namespace or config.namespace or "default",
        name=config.lease_name,
        holder=leadership.identity(),
        duration=config.lease_duration_seconds,
    )
    memo.leader = leader
    memo.gate = asyncio.Semaphore(CONCURRENCY)
    await leader.attempt()  # Decide before kopf's peering starts, so the leader never pauses.
    settings.peering.priority = leader.priority

    def follow(held: bool) -> None:
        settings.peering.priority = leader.priority  # kopf peering pauses the standbys' handlers.
        logger.info("Leadership %s; kopf peering priority %d.", "gained" if held else "lost", leader.priority)

    memo.leader_task = asyncio.create_task(leader.run(on_change=follow), name="leadership")
    memo.retention_task = asyncio.create_task(
        retention.run(
            store=store,
            guard=leader,
            metrics=collector,
            retention_seconds=config.retention_seconds,
            interval_seconds=config.retention_sweep_interval_seconds,
        ),
        name="retention",
    )
    try:
        await store.ping()
    except errors.StoreUnavailable as e:
        logger.error(
            "%s; captures cannot be stored until it is back, so refused pods are kept.", str(e).rstrip(".")
        )
    logger.info("agentihooks-swarm started (namespace: %s).", config.namespace or "all")


@kopf.on.cleanup()
async def stop(memo: Any, **_: Any) -> None:
    sweeping: asyncio.Task[None] | None = memo.get("retention_task")
    if sweeping is not None:
        sweeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeping
    task: asyncio.Task[None] | None = memo.get("leader_task")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await memo.leader.release()
    stack: contextlib.AsyncExitStack | None = memo.get("stack")
    if stack is not None:
        await stack.aclose()


@kopf.on.create(GROUP, VERSION, "executions")
async def launch_execution(memo: Any, **kwargs: Any) -> None:
    async with memo.gate:  # See CONCURRENCY.
        await _launch(memo=memo, **kwargs)


async def _launch(
    name: str,
    namespace: str | None,
    spec: Any,
    status: Any,
    body: Any,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    assert namespace is not None  # Executions are namespaced.
    _lead(memo, before="launching")
    wired: launch.Runtime = memo.runtime
    store: AsyncStore = memo.store
    notify = events.KopfEvents(body=body)
    try:
        execution = resources.parse_execution(name=name, spec=spec)
    except errors.InvalidResource as e:
        patch.status["phase"] = "Invalid"
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(type_="Invalid", status=True, reason="InvalidSpec", message=str(e)),
        )
        raise kopf.PermanentError(str(e)) from e

    generation = int(status.get("attempt") or 1)
    hand = _hand_from_status(status, generation=generation)
    if hand is None:
        swarm_spec = await _swarm(
            wired=wired, namespace=namespace, name=execution.swarm, status=status, patch=patch
        )
        attempt = launch.Attempt(
            namespace=namespace, slug=execution.swarm, execution=name, generation=generation
        )
        try:
            hand = await launch.launch(
                runtime=wired,
                attempt=attempt,
                swarm=swarm_spec,
                execution=execution,
                notify=notify,
                guard=memo.leader,
            )
        except launch.ForeignPod as e:
            patch.status["phase"] = "Blocked"
            _set_condition(
                patch,
                status.get("conditions"),
                _condition(type_="Launched", status=False, reason="PodNameTaken", message=str(e)),
            )
            raise kopf.TemporaryError(f"{e}; remove that pod to let this execution launch", delay=60) from e
        except leadership.NotLeader as e:
            raise kopf.TemporaryError(
                f"{e}; the leader takes over", delay=CONFIG.lease_duration_seconds / 3
            ) from e
        except errors.ApiError as e:
            raise kopf.TemporaryError(f"Launch did not finish: {e}", delay=10) from e
        patch.status["attempt"] = generation
        patch.status["pod"] = hand.pod
        patch.status["hand"] = {"handed": hand.handed, "reason": hand.reason, "removed": hand.removed}
        patch.status["phase"] = "Running" if hand.handed else "Refused"
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(
                type_="Handed",
                status=hand.handed,
                reason=hand.reason or "Handed",
                message=f"Worker pod {hand.pod}: "
                + (
                    "grant handed"
                    if hand.handed
                    else f"hand refused ({hand.reason}), removed: {str(hand.removed).lower()}"
                ),
            ),
        )

    # The status above is applied by kopf even if Redis fails below; the retry then finds the hand
    # in the status and only repeats these writes.
    try:
        await store.save_hand(slug=execution.swarm, execution=name, hand=hand)
        if not hand.handed:
            await store.record_final(
                slug=execution.swarm,
                final=records.FinalRecord(
                    execution=name,
                    generation=generation,
                    state=records.FinalState.REFUSED,
                    transcript_end=0,
                    outcome=store.key(execution.swarm, "attempt-outcomes"),
                ),
            )
    except errors.StoreUnavailable as e:
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(type_="Recorded", status=False, reason="StoreUnavailable", message=str(e)),
        )
        raise kopf.TemporaryError(f"{e}; the hand result will be written when Redis is back", delay=15) from e
    _set_condition(
        patch,
        status.get("conditions"),
        _condition(type_="Recorded", status=True, reason="Stored", message="Hand result stored in Redis."),
    )


def _hand_from_status(status: Any, *, generation: int) -> records.HandResult | None:
    stored = status.get("hand")
    if not isinstance(stored, dict) or status.get("attempt") != generation or not status.get("pod"):
        return None
    return records.HandResult(
        generation=generation,
        handed=bool(stored.get("handed")),
        reason=stored.get("reason"),
        removed=stored.get("removed"),
        pod=status["pod"],
    )


async def _swarm(
    *, wired: launch.Runtime, namespace: str, name: str, status: Any, patch: kopf.Patch
) -> resources.SwarmSpec:
    try:
        found = await wired.pods.read_custom(namespace=namespace, plural="swarms", name=name)
    except errors.ApiError as e:
        raise kopf.TemporaryError(f"Could not read Swarm {namespace}/{name}: {e}", delay=10) from e
    if found is None:
        message = f"Swarm {namespace}/{name} does not exist; create it (or fix spec.swarm)"
        patch.status["phase"] = "Pending"
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(type_="SwarmFound", status=False, reason="SwarmNotFound", message=message),
        )
        raise kopf.TemporaryError(message, delay=30)
    try:
        return resources.parse_swarm(name=name, spec=found.get("spec"))
    except errors.InvalidResource as e:
        patch.status["phase"] = "Pending"
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(type_="SwarmFound", status=False, reason="SwarmInvalid", message=str(e)),
        )
        raise kopf.TemporaryError(f"{e}; fix the Swarm", delay=60) from e


def _lead(memo: Any, *, before: str) -> None:
    """Standbys do nothing: kopf retries the handler, by when this replica may lead."""
    try:
        memo.leader.check(before=before)
    except leadership.NotLeader as e:
        raise kopf.TemporaryError(str(e), delay=CONFIG.lease_duration_seconds / 3) from e


async def _advance(
    *,
    name: str,
    namespace: str,
    spec: Any,
    status: Any,
    body: Any,
    patch: kopf.Patch,
    memo: Any,
    cancelled: bool,
) -> attempts.Progress | None:
    """One pass over an attempt after its launch; writes its progress to the status."""
    generation = int(status.get("attempt") or 1)
    hand = _hand_from_status(status, generation=generation)
    if hand is None:
        return None
    slug = str(spec.get("swarm"))
    attempt = launch.Attempt(namespace=namespace, slug=slug, execution=name, generation=generation)
    try:
        async with memo.gate:  # See CONCURRENCY.
            progress = await attempts.advance(
                runtime=memo.runtime,
                store=memo.store,
                guard=memo.leader,
                attempt=attempt,
                hand=hand,
                cancelled=cancelled,
                deadline_seconds=CONFIG.archive_deadline_seconds,
                notify=events.KopfEvents(body=body),
            )
    except leadership.NotLeader:
        return None
    except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable) as e:
        wired: launch.Runtime = memo.runtime
        wired.metrics.cleanup_failures.labels(error=type(e).__name__).inc()
        if isinstance(e, errors.StoreUnavailable):
            wired.metrics.store_failures.labels(path="cleanup").inc()
        _put(patch, status, "phase", "Cleaning")
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(type_="CleanedUp", status=False, reason=type(e).__name__, message=str(e)),
        )
        raise
    _put(patch, status, "phase", progress.phase)
    if progress.outcome is not None:
        _put(patch, status, "outcome", str(progress.outcome))
    _put(patch, status, "waitingFor", progress.waiting_for or None)
    _put(patch, status, "reason", progress.reason or None)
    _put(patch, status, "failureClass", progress.failure_class)
    if progress.reason:
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(
                type_="Started",
                status=False,
                reason=progress.reason,
                message=progress.message or f"The attempt ended: {progress.reason}.",
            ),
        )
    if progress.retained is not None:
        removed = progress.retained.removed
        cleaned = {
            "pods": {r.name: r.outcome for r in removed.pods},
            "services": {r.name: r.outcome for r in removed.services},
            "archived": progress.retained.archived,
        }
        _put(patch, status, "cleanup", cleaned)
        _set_condition(
            patch,
            status.get("conditions"),
            _condition(
                type_="CleanedUp",
                status=True,
                reason="Retained",
                message="Evidence moved to attempt-retained; every pinned object has an outcome.",
            ),
        )
    return progress


@kopf.timer(
    GROUP,
    VERSION,
    "executions",
    interval=CONFIG.cleanup_interval_seconds,
    when=lambda status, **_: status.get("phase") not in ("Done", "Invalid"),
)
async def advance_execution(
    name: str,
    namespace: str | None,
    spec: Any,
    status: Any,
    body: Any,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    assert namespace is not None
    if not memo.leader.holds():
        return
    try:
        await _advance(
            name=name,
            namespace=namespace,
            spec=spec,
            status=status,
            body=body,
            patch=patch,
            memo=memo,
            cancelled=bool(spec.get("cancel")),
        )
    except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable) as e:
        logger.warning(
            "Cleanup pass failed, the next pass retries in %ss: %s", CONFIG.cleanup_interval_seconds, e
        )


@kopf.on.delete(GROUP, VERSION, "executions")
async def cancel_execution(
    name: str,
    namespace: str | None,
    spec: Any,
    status: Any,
    body: Any,
    patch: kopf.Patch,
    memo: Any,
    **_: Any,
) -> None:
    """A deleted Execution's attempt is cancelled; the Execution goes once its cleanup finished."""
    assert namespace is not None
    _lead(memo, before="cleaning up a deleted execution")
    try:
        progress = await _advance(
            name=name,
            namespace=namespace,
            spec=spec,
            status=status,
            body=body,
            patch=patch,
            memo=memo,
            cancelled=True,
        )
    except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable) as e:
        raise kopf.TemporaryError(
            f"Cleanup before deletion failed: {e}", delay=CONFIG.cleanup_interval_seconds
        ) from e
    if progress is not None and not progress.done:
        raise kopf.TemporaryError(
            f"Waiting before deletion: {progress.waiting_for or progress.phase}",
            delay=CONFIG.cleanup_interval_seconds,
        )
