"""The kopf decorators, and nothing else: each handler reads its arguments, calls one function
of the logic modules, writes the status, and translates this package's errors into
``kopf.TemporaryError`` / ``kopf.PermanentError``. Run with ``kopf run -m agentihooks_swarm.handlers``
(or ``python -m agentihooks_swarm run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from typing import Any

import kopf

from agentihooks_swarm import (
    attempts,
    bookkeeping,
    cleanup,
    errors,
    events,
    finished,
    launch,
    leadership,
    metrics,
    passes,
    records,
    resources,
    retention,
    runtime,
    settings as settings_,
    status as status_,
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
#: Seconds between launches that failed for a reason that may pass (409, 429, 5xx, timeouts, 403).
LAUNCH_RETRY = 10


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    config = CONFIG
    # kopf's bookkeeping in the status (one patch after a handler, not two), without large values.
    settings.persistence.progress_storage = bookkeeping.StatusProgress(prefix=GROUP)
    settings.persistence.diffbase_storage = bookkeeping.CompactDiffBase(prefix=GROUP)
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 32
    settings.watching.server_timeout = 300
    # Done Executions are not kopf's (memory follows the work in flight): see `finished`.
    settings.watching.field_selectors[GROUP, "executions"] = finished.FIELD_SELECTOR_IN_FLIGHT
    # kopf's initial list of the Executions in flight, in pages: 100 objects held at once, not 500.
    settings.watching.chunk_size = 100
    # kopf keeps a worker per object, holding the object's last body, until it has been idle this
    # long (5 s by default). At a restart with 2,000 Executions in flight, the idle workers' bodies
    # were 30 MiB of the peak RSS; at 0.1 s a worker ends once its events are handled and the next
    # event starts another (that restart's peak: 142 to 120 MiB; make bench-history at 20,000 Done:
    # 152 to 123 MiB; docs/benchmarks.md).
    settings.queueing.idle_timeout = 0.1
    collector = metrics.Metrics()
    if config.metrics_port:
        collector.serve(port=config.metrics_port)
    stack = contextlib.AsyncExitStack()
    # The wiring is the production one unless whoever runs kopf in-process passes another in its
    # memo (only tests/bench does, for its capture-free baseline): no variable or setting reaches it.
    opener = memo.get("open_runtime") or runtime.open_runtime
    wired, store = await stack.enter_async_context(opener(settings=config, collector=collector))
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
    memo.inflight = passes.InFlight()
    memo.expiry = finished.Expiry(default_ttl=config.ttl_seconds_after_finished)
    memo.tasks = _background(memo=memo, config=config, finalizer=settings.persistence.finalizer)
    try:
        await store.ping()
    except errors.StoreUnavailable as e:
        logger.error(
            "%s; captures cannot be stored until it is back, so refused pods are kept.", str(e).rstrip(".")
        )
    # What is alive now (the modules: kubernetes-asyncio's client alone is ~36 MiB of objects) lives
    # as long as the process: the collector need not traverse it again in every full collection.
    gc.freeze()
    # The young generation collected every 5,000 allocations, not 700: each pass allocates
    # thousands of short-lived objects (JSON, requests, tasks), and collections were 2 ms of the
    # CPU per refused Pod in make bench A (with the freeze and this threshold: 0.7 ms; it costs
    # about 5 MiB of peak RSS there).
    gc.set_threshold(5000, 10, 10)
    logger.info("agentihooks-swarm started (namespace: %s).", config.namespace or "all")


def _background(*, memo: Any, config: settings_.Settings, finalizer: str) -> list[asyncio.Task[None]]:
    """The operator-wide tasks: the passes over Executions in flight, the watch of every Execution
    (the passes' table, the Done ones' expiry), their expiry, and the index of the Pods' Events
    that captures read."""
    wired: launch.Runtime = memo.runtime
    leader: leadership.Leadership = memo.leader

    async def visit(tracked: passes.Tracked) -> Any:
        async with memo.gate:  # See CONCURRENCY.
            return await passes.visit(
                tracked=tracked,
                runtime=wired,
                store=memo.store,
                guard=leader,
                deadline_seconds=config.archive_deadline_seconds,
            )

    watcher = finished.Watcher(
        client=wired.pods,
        namespace=config.namespace,
        expiry=memo.expiry,
        finalizer=finalizer,
        inflight=memo.inflight,
    )
    memo.watcher = watcher
    return [
        asyncio.create_task(
            passes.run_passes(
                inflight=memo.inflight,
                interval=config.cleanup_interval_seconds,
                holds=leader.holds,
                visit_one=visit,
                workers=CONCURRENCY,
            ),
            name="passes",
        ),
        asyncio.create_task(watcher.run(), name="executions"),
        *([asyncio.create_task(wired.events.run(), name="pod events")] if wired.events is not None else []),
        asyncio.create_task(
            finished.run_expiry(expiry=memo.expiry, holds=leader.holds, delete=wired.pods.delete_custom),
            name="expiry",
        ),
    ]


@kopf.on.cleanup()
async def stop(memo: Any, **_: Any) -> None:
    for background in memo.get("tasks") or []:
        background.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await background
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


@kopf.on.update(GROUP, VERSION, "executions", when=lambda status, **_: status_.relaunchable(status))
async def relaunch_execution(memo: Any, **kwargs: Any) -> None:
    """An Invalid Execution that changed (its spec, or the relaunch annotation) is launched again."""
    async with memo.gate:
        await _launch(memo=memo, **kwargs)


@kopf.on.event(GROUP, VERSION, "swarms")
async def swarm_changed(
    type: str | None, body: Any, namespace: str | None, memo: Any, logger: kopf.Logger, **_: Any
) -> None:
    """A Swarm that changed relaunches the Executions whose Pod was refused for its older version.

    An event handler keeps no bookkeeping on the Swarm; the Executions' ``rejectedWith`` stamp
    makes a repeated event (or the listing at startup) a no-op.
    """
    if type == "DELETED" or namespace is None or not memo.leader.holds():
        return
    seen: dict[str, str] = memo.setdefault("swarm_stamps", {})
    key, stamp = f"{namespace}/{body.get('metadata', {}).get('name')}", status_.swarm_stamp(body)
    if seen.get(key) == stamp:  # Not a new version of its spec: nothing to relaunch for.
        return
    try:
        nudged = await launch.relaunch_after_swarm_change(
            client=memo.runtime.pods, namespace=namespace, swarm=dict(body)
        )
    except errors.ApiError as e:  # The next event, or a restart's listing, tries again.
        logger.warning("Could not relaunch the Executions refused for an older Swarm: %s", e)
        return
    seen[key] = stamp
    if nudged:
        logger.info("Swarm changed; launching again: %s.", ", ".join(nudged))


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
        status_.apply(patch.status, status, status_.invalid_spec(str(e)))
        raise kopf.PermanentError(str(e)) from e

    generation = int(status.get("attempt") or 1)
    hand = _hand_from_status(status, generation=generation)
    if hand is None:
        swarm_spec, stamp = await _swarm(
            wired=wired, namespace=namespace, name=execution.swarm, status=status, patch=patch
        )
        attempt = launch.Attempt(
            namespace=namespace, slug=execution.swarm, execution=name, generation=generation
        )
        try:
            launched = await launch.launch(
                runtime=wired,
                attempt=attempt,
                swarm=swarm_spec,
                execution=execution,
                notify=notify,
                guard=memo.leader,
            )
        except errors.SpecRejected as e:
            answer = status_.rejected(e, swarm_stamp=stamp)
            status_.apply(patch.status, status, answer)
            notify.warning(reason=answer.conditions[0]["reason"], message=str(e))
            raise kopf.PermanentError(str(e)) from e
        except launch.ForeignPod as e:
            status_.apply(patch.status, status, status_.pod_name_taken(str(e)))
            raise kopf.TemporaryError(f"{e}; remove that pod to let this execution launch", delay=60) from e
        except leadership.NotLeader as e:
            raise kopf.TemporaryError(
                f"{e}; the leader takes over", delay=CONFIG.lease_duration_seconds / 3
            ) from e
        except errors.ApiError as e:
            status_.apply(patch.status, status, status_.launch_failed(e, retry_seconds=LAUNCH_RETRY))
            raise kopf.TemporaryError(f"Launch did not finish: {e}", delay=LAUNCH_RETRY) from e
        hand = launched.hand
        status_.apply(
            patch.status,
            status,
            status_.handed(hand, detail=launched.detail, earlier=status.get("conditions")),
        )
        if hand.handed:  # What the passes report until the worker ends: written once, here.
            patch.status["waitingFor"] = attempts.WORKER_RUNNING

    # The status above is applied by kopf even if Redis fails below; the retry then finds the hand
    # in the status and only repeats these writes.
    try:
        await store.save_hand(
            slug=execution.swarm,
            execution=name,
            hand=hand,
            final=None
            if hand.handed
            else records.FinalRecord(
                execution=name,
                generation=generation,
                state=records.FinalState.REFUSED,
                transcript_end=0,
                outcome=store.key(execution.swarm, "attempt-outcomes"),
            ),
        )
    except errors.StoreUnavailable as e:
        status_.set_condition(patch.status, status.get("conditions"), status_.not_recorded(e))
        raise kopf.TemporaryError(f"{e}; the hand result will be written when Redis is back", delay=15) from e
    status_.set_condition(patch.status, status.get("conditions"), status_.recorded())


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
) -> tuple[resources.SwarmSpec, str]:
    """The parsed Swarm and its stamp (``uid/generation``, see :func:`status.swarm_stamp`)."""
    try:
        found = await wired.pods.read_custom(namespace=namespace, plural="swarms", name=name)
    except errors.ApiError as e:
        raise kopf.TemporaryError(f"Could not read Swarm {namespace}/{name}: {e}", delay=10) from e
    if found is None:
        answer = status_.swarm_missing(namespace=namespace, name=name)
        status_.apply(patch.status, status, answer)
        raise kopf.TemporaryError(answer.conditions[0]["message"], delay=30)
    try:
        return resources.parse_swarm(name=name, spec=found.get("spec")), status_.swarm_stamp(found)
    except errors.InvalidResource as e:
        status_.apply(patch.status, status, status_.swarm_invalid(str(e)))
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
        passes.count_failure(memo.runtime, e)
        status_.failed(patch.status, status, e)
        raise
    status_.progress(patch.status, status, progress)
    return progress


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
