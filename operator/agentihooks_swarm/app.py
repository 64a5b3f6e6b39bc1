"""The operator's wiring, built in one place: :class:`App` holds every collaborator, typed.

:func:`open_app` builds it from the settings (the API client and the Kubernetes clients on it, Redis,
metrics, the Lease, the Executions' table and queue, the lifecycle, the informers) and closes what
it opened.
:meth:`App.runnables` names the background tasks the supervisor keeps running. Nothing here
starts a task or talks to kopf: :mod:`__main__` runs the whole, tests and the bench build an
``App`` with the collaborators they choose (the bench's capture-free baseline passes its own
``capture``; there is no setting or variable for it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pathlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from agentihooks_swarm import (
    kopf_adapter,
    metrics as metrics_,
    settings as settings_,
    supervisor as supervisor_,
    text,
)
from agentihooks_swarm.capture import diagnostics, redaction
from agentihooks_swarm.controller import (
    executions as executions_,
    leadership,
    orphans,
    reconciler as reconciler_,
    retention,
    swarm_watch,
    worker_pods,
)
from agentihooks_swarm.controller.workqueue import KeyedQueue, Priority
from agentihooks_swarm.kubernetes import api, clients, event_index, informer, secrets
from agentihooks_swarm.lifecycle import model, quota as quota_, step as lifecycle, worker_policy
from agentihooks_swarm.storage import acl, failover, operations
from agentihooks_swarm.swarm import credentials as credentials_, status as swarms_, worker_secret

#: How often the expiry task looks at the earliest due Execution.
EXPIRY_TICK_SECONDS: Final = 1.0


@dataclasses.dataclass(kw_only=True)
class App:
    settings: settings_.Settings
    metrics: metrics_.Metrics
    cluster: clients.Clients
    store: operations.AsyncStore
    runtime: model.Runtime
    leader: leadership.Leadership
    table: executions_.Executions
    queue: KeyedQueue[str]
    reconciler: reconciler_.Reconciler
    informers: tuple[informer.Informer, ...]
    supervisor: supervisor_.Supervisor
    swarms: swarms_.SwarmStatus
    #: None when the store keeps no recent evidence (a store a test or the bench built).
    primary: failover.PrimaryWatch | None = None
    #: The swarms' worker Redis credentials (docs/workers.md).
    credentials: credentials_.WorkerCredentials | None = None

    @property
    def quota(self) -> quota_.Quota | None:
        """The swarms' byte quota the steps hold launches to, and its measures."""
        return self.reconciler.lifecycle.quota

    def runnables(self) -> list[supervisor_.Runnable]:
        """The background tasks; the leader-only ones check the Lease on each round."""
        tasks = [
            supervisor_.Runnable(name="leadership", run=self._lead),
            *(supervisor_.Runnable(name=f"watch {i.name}", run=i.run) for i in self.informers),
            supervisor_.Runnable(name="steps", run=self.reconciler.work),
            supervisor_.Runnable(name="resync", run=self.reconciler.resync),
            supervisor_.Runnable(name="expiry", run=self._expire),
            supervisor_.Runnable(name="swarm status", run=self.swarms.run),
        ]
        if self.primary is not None:
            tasks.append(supervisor_.Runnable(name="redis primary", run=self.primary.run))
        if self.settings.retention_seconds > 0:
            tasks.append(supervisor_.Runnable(name="retention", run=self._sweep))
        if self.quota is not None:
            tasks.append(supervisor_.Runnable(name="quota", run=self._measure))
        if self.credentials is not None:
            tasks.append(supervisor_.Runnable(name="worker credentials", run=self.credentials.run))
        return tasks

    async def _lead(self) -> None:
        def follow(held: bool) -> None:
            # What this replica wrote stays kept for a restore when it loses the Lease: it is the
            # only one that knows those records (failover.PrimaryWatch).
            if held:  # Catch up with everything at once: a standby stepped nothing.
                self.reconciler.resync_now()

        await self.leader.run(on_change=follow)

    async def _expire(self) -> None:
        await executions_.run_expiry(
            expiry=self.table.expiry,
            holds=self.leader.holds,
            delete=self.cluster.executions.delete,
            tick=EXPIRY_TICK_SECONDS,
        )

    async def _sweep(self) -> None:
        await retention.run(
            store=self.store,
            guard=self.leader,
            metrics=self.metrics,
            retention_seconds=self.settings.retention_seconds,
            interval_seconds=self.settings.retention_sweep_interval_seconds,
        )

    async def _measure(self) -> None:
        assert self.quota is not None
        await self.quota.run(swarms=self.store.swarms, holds=self.leader.holds)

    def problems(self) -> dict[str, object]:
        """What makes this replica unhealthy (empty when it is healthy): a task given up."""
        if self.supervisor.given_up is None:
            return {}
        return {"given_up": self.supervisor.given_up, "tasks": self.supervisor.running()}

    def synced(self) -> Mapping[str, bool]:
        """Each watch, and whether it has listed its objects at least once."""
        return {i.name: i.ready.is_set() for i in self.informers}


@contextlib.asynccontextmanager
async def open_app(
    *,
    settings: settings_.Settings,
    metrics: metrics_.Metrics | None = None,
    capture: diagnostics.Capture = diagnostics.startup,
    identity: str | None = None,
) -> AsyncIterator[App]:
    """The operator's collaborators for the lifetime of the ``async with`` block."""
    metrics = metrics or metrics_.Metrics()
    client = await api.client()
    try:
        async with operations.open_store(settings, metrics=metrics) as store:
            yield build(
                settings=settings,
                metrics=metrics,
                cluster=clients.build(api=client, timeout=settings.api_timeout_seconds),
                store=store,
                capture=capture,
                identity=identity or leadership.identity(),
                legacy_finalizers=kopf_adapter.legacy_finalizers(),
            )
    finally:
        await client.close()


def build(
    *,
    settings: settings_.Settings,
    metrics: metrics_.Metrics,
    cluster: clients.Clients,
    store: operations.AsyncStore,
    capture: diagnostics.Capture = diagnostics.startup,
    identity: str,
    legacy_finalizers: frozenset[str] = frozenset(),
) -> App:
    """An :class:`App` on the given clients and store."""
    index = event_index.EventIndex(namespaces=settings.served_namespaces, metrics=metrics)
    queue, table, pods_table = _tables(settings=settings, legacy_finalizers=legacy_finalizers)
    runtime = _runtime(
        settings=settings,
        metrics=metrics,
        cluster=cluster,
        store=store,
        capture=capture,
        index=index,
        workers=pods_table,
    )
    leader = leadership.Leadership(
        leases=cluster.leases,
        namespace=settings.lease_namespace or next(iter(settings.served_namespaces), "default"),
        name=settings.lease_name,
        holder=identity,
        duration=settings.lease_duration_seconds,
    )
    swarms = swarm_watch.Swarms()
    watches = _watches(
        settings=settings, cluster=cluster, table=table, index=index, workers=pods_table, swarms=swarms
    )
    made = _credentials(settings=settings, runtime=runtime, store=store, leader=leader, identity=identity)
    steps = _lifecycle(
        settings=settings,
        runtime=runtime,
        store=store,
        leader=leader,
        identity=identity,
        legacy=legacy_finalizers,
        credentials=made,
        swarms=swarms,
    )
    return App(
        settings=settings,
        metrics=metrics,
        cluster=cluster,
        store=store,
        runtime=runtime,
        leader=leader,
        table=table,
        queue=queue,
        reconciler=_reconciler(
            settings=settings,
            metrics=metrics,
            steps=steps,
            table=table,
            queue=queue,
            leader=leader,
            parking=watches[-1],
            workers=pods_table,
            adopt=orphans.Orphans(
                workers=pods_table,
                table=table,
                store=store,
                executions=cluster.executions,
                wake=queue.add,
                metrics=metrics,
            ),
        ),
        informers=watches,
        supervisor=supervisor_.Supervisor(metrics=metrics),
        swarms=_swarm_status(
            settings=settings, runtime=runtime, store=store, leader=leader, identity=identity
        ),
        primary=_primary(store=store, metrics=metrics, leader=leader, on_change=made.wake),
        credentials=made,
    )


def _tables(
    *, settings: settings_.Settings, legacy_finalizers: frozenset[str]
) -> tuple[KeyedQueue[str], executions_.Executions, worker_pods.WorkerPods]:
    """The work queue, the Executions' table that feeds it, and the worker Pods' table that wakes
    an Execution when its worker changes (and answers the steps' reads a stale view cannot harm)."""
    queue: KeyedQueue[str] = KeyedQueue()
    table = executions_.Executions(
        expiry=executions_.Expiry(default_ttl=settings.ttl_seconds_after_finished),
        wake=queue.add,
        legacy_finalizers=legacy_finalizers,
        clock=time.monotonic,
    )
    workers = worker_pods.WorkerPods(
        owners=table.named,
        wake=queue.add,
        evidence=functools.partial(queue.add, priority=Priority.EVIDENCE),
        handed=table.handed,
    )
    return queue, table, workers


def _runtime(
    *,
    settings: settings_.Settings,
    metrics: metrics_.Metrics,
    cluster: clients.Clients,
    store: operations.AsyncStore,
    capture: diagnostics.Capture,
    index: event_index.EventIndex,
    workers: worker_pods.WorkerPods,
) -> model.Runtime:
    """What every step uses: the clients, the recorder, the capture (redacting before it is stored
    when the settings say so) and the worker policy."""
    redactor = settings.redactor()
    return model.Runtime(
        cluster=cluster,
        recorder=store,
        metrics=metrics,
        startup_deadline_seconds=settings.startup_deadline_seconds,
        startup=redaction.redacting(capture, redactor=redactor) if settings.store_redacted else capture,
        events=index,
        worker_policy=worker_policy.WorkerPolicy.from_settings(settings),
        redactors=text.Redactors(redactor),
        store_redactor=redactor if settings.store_redacted else None,
        workers=workers,
    )


def _swarm_status(
    *,
    settings: settings_.Settings,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    leader: leadership.Leadership,
    identity: str,
) -> swarms_.SwarmStatus:
    """The leader's loop over the Swarms' status (refusals, budget, slug)."""
    return swarms_.SwarmStatus(
        cluster=runtime.cluster,
        store=store,
        metrics=runtime.metrics,
        namespaces=settings.served_namespaces,
        holds=leader.holds,
        interval=settings.cleanup_interval_seconds,
        instance=identity,
        redactors=runtime.redactors,
    )


def _primary(
    *,
    store: operations.AsyncStore,
    metrics: metrics_.Metrics,
    leader: leadership.Leadership,
    on_change: Callable[[], None],
) -> failover.PrimaryWatch | None:
    """The watch of the Redis primary (None when the store keeps no recent evidence: a store a test
    or the bench built); ``on_change`` is told of each new primary."""
    if store.recent is None:
        return None
    return failover.PrimaryWatch(store=store, recent=store.recent, metrics=metrics, on_change=on_change)


def _lifecycle(
    *,
    settings: settings_.Settings,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    leader: leadership.Leadership,
    identity: str,
    legacy: frozenset[str],
    credentials: credentials_.WorkerCredentials,
    swarms: swarm_watch.Swarms,
) -> lifecycle.Lifecycle:
    """The steps, with the swarms' byte quota they hold launches to and the Swarms as watched."""
    return lifecycle.Lifecycle(
        runtime=runtime,
        store=store,
        guard=leader,
        instance=identity,
        archive_deadline_seconds=settings.archive_deadline_seconds,
        legacy_finalizers=legacy,
        quota=quota_.Quota(store=store, metrics=runtime.metrics, bound=settings.swarm_quota_bytes),
        credentials=credentials,
        swarms=swarms,
    )


def _credentials(
    *,
    settings: settings_.Settings,
    runtime: model.Runtime,
    store: operations.AsyncStore,
    leader: leadership.Leadership,
    identity: str,
) -> credentials_.WorkerCredentials:
    """The swarms' worker Redis users and their Secrets, on the runtime's clients and the store."""
    cluster = runtime.cluster
    ca = None if settings.redis_ca_file is None else pathlib.Path(settings.redis_ca_file).read_text()
    return credentials_.WorkerCredentials(
        secrets=secrets.SecretClient(transport=cluster.transport),
        swarms=cluster.swarms,
        events=cluster.events,
        users=acl.WorkerUsers(connection=store),
        metrics=runtime.metrics,
        content=worker_secret.Content(
            address=worker_secret.address(settings), prefix=settings.key_prefix, ca=ca
        ),
        slugs=store.slugs,
        namespaces=settings.served_namespaces,
        holds=leader.holds,
        interval=settings.worker_credentials_interval_seconds,
        rotation_seconds=settings.worker_credentials_rotation_seconds,
        instance=identity,
        reader_digests=() if settings.reader_password is None else (acl.digest(settings.reader_password),),
    )


def _reconciler(
    *,
    settings: settings_.Settings,
    metrics: metrics_.Metrics,
    steps: lifecycle.Lifecycle,
    table: executions_.Executions,
    queue: KeyedQueue[str],
    leader: leadership.Leadership,
    parking: informer.Informer,
    adopt: orphans.Orphans,
    workers: worker_pods.WorkerPods,
) -> reconciler_.Reconciler:
    """The workers that run the steps; a running worker is parked only while ``parking`` (the
    worker Pods' watch) is in sync."""
    return reconciler_.Reconciler(
        lifecycle=steps,
        table=table,
        queue=queue,
        metrics=metrics,
        holds=leader.holds,
        interval=settings.cleanup_interval_seconds,
        parked_seconds=worker_pods.PARKED_ROUNDS * settings.cleanup_interval_seconds,
        parking=lambda: parking.synced,
        adopt=adopt.adopt,
        urgency=functools.partial(reconciler_.urgency, workers=workers),
    )


def _watches(
    *,
    settings: settings_.Settings,
    cluster: clients.Clients,
    table: executions_.Executions,
    index: event_index.EventIndex,
    workers: worker_pods.WorkerPods,
    swarms: swarm_watch.Swarms,
) -> tuple[informer.Informer, ...]:
    """The informers: the Executions, the Pods' Events, the Swarms, and the worker Pods (last: a
    worker is parked only while this watch is in sync); each lists and watches every namespace
    served on its own (none: the whole cluster)."""
    served = settings.served_namespaces or (None,)
    return (
        informer.Informer(
            name="executions",
            sources=[cluster.executions.listing(namespace=n) for n in served],
            handler=table,
            page=executions_.PAGE,
            refused_hint="grant list and watch on executions.swarm.agentihooks.io",
        ),
        event_index.informer(client=cluster.pods, index=index),
        informer.Informer(
            name="swarms",
            sources=[cluster.swarms.listing(namespace=n) for n in served],
            handler=swarms,
            on_sync=swarms.synced,
            refused_hint="grant list and watch on swarms.swarm.agentihooks.io; launches read Swarms live",
        ),
        informer.Informer(
            name="worker pods",
            sources=[cluster.pods.worker_pods_listing(namespace=n) for n in served],
            handler=workers,
            page=worker_pods.PAGE,
            on_sync=workers.synced,
            refused_hint="grant list and watch on pods; until then running workers are read on every resync",
        ),
    )
