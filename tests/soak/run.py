"""One soak run: the rig up, the checker watching, the workload and the faults at once, then the
wait for convergence, the end-of-run reads and the verdicts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Sequence, Set
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import redis

from tests.bench import kube
from tests.soak import plan as plan_
from tests.soak.checker import audit, rules
from tests.soak.checker.model import CONVERGED, Restore
from tests.soak.checker.observe import ExecutionObserver, PodObserver, Prober, restores_logged, sample
from tests.soak.checker.records import DEFAULT_PREFIX, Agreement, Stored, read_all, read_commands_agree
from tests.soak.faults import Injector, Ledger
from tests.soak.report import Report
from tests.soak.rig import NAMESPACE, Rig
from tests.soak.workload import Tally, Workload
from tests.support.cluster.control_plane import AUDIT_LOG

REPO: Final = Path(__file__).resolve().parents[2]
#: How often the operators' memory and /metrics are read.
SAMPLE_EVERY: Final = 2.0
#: Spec read commands run for this many records of each kind.
READ_SAMPLE: Final = 5


@dataclass(frozen=True)
class Options:
    seed: int
    executions: int
    period: float
    faults: int
    node: plan_.Node
    heavy_once: bool
    workdir: Path
    bound: float
    """Rule 5: seconds after the faults stop within which every Execution must converge."""
    rss_bound_mib: float


def operator_under_test() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "operator"],
        capture_output=True,
        text=True,
        check=False,
    )
    return (done.stdout.strip()[:72] or "unknown") + (" (operator/ modified)" if dirty.stdout.strip() else "")


def run(options: Options) -> Report:
    began = time.monotonic()
    plan = plan_.make(
        seed=options.seed,
        executions=options.executions,
        period=options.period,
        faults=options.faults,
        node=options.node,
        heavy_once=options.heavy_once,
    )
    print(
        f"soak: plan {plan.digest()}: {len(plan.executions)} Executions over {plan.period:.0f}s, "
        f"{len(plan.faults)} faults",
        flush=True,
    )
    with Rig(node=options.node, workdir=options.workdir) as rig:
        setup = time.monotonic() - began
        report = asyncio.run(_soak(rig, plan, options))
    report.timings = {"setup": setup, **report.timings, "total": time.monotonic() - began}
    return report


@dataclass
class _Seen:
    """What one run saw: the checker's watches, the workload and the faults, and the end-of-run
    reads of Redis."""

    workload: Workload
    pods_seen: PodObserver
    executions_seen: ExecutionObserver
    tally: Tally
    ledger: Ledger
    origin: float
    """When the workload and the faults started (monotonic)."""
    calm: float
    """The last fault's end or the workload's last create, cancel or delete (monotonic)."""
    stored: Stored
    read_error: str | None
    agreements: list[Agreement]
    timings: dict[str, float]


async def _soak(rig: Rig, plan: plan_.Plan, options: Options) -> Report:
    wall_offset = time.time() - time.monotonic()  # The operators' logs say wall-clock times.
    seen = await _watch_and_run(rig, plan, options)
    for replica in rig.replicas.values():  # A last reading of each running process.
        if replica.life is not None and replica.pid is not None:
            sample(replica.life, metrics_port=replica.metrics_port)
    restores = sorted(
        (
            restore
            for name in rig.replicas
            for restore in restores_logged(
                options.workdir / f"operator-{name}.log", replica=name, wall_offset=wall_offset
            )
        ),
        key=lambda r: r.at,
    )
    verdicts = _judge(rig, options, seen=seen, restores=restores)
    pods_seen, executions_seen = seen.pods_seen, seen.executions_seen
    _dump(
        options.workdir,
        pods=[asdict(p) for p in pods_seen.pods.values()],
        executions=[asdict(e) for e in executions_seen.executions.values()],
        captures=[asdict(c) for c in seen.stored.captures],
        findings=[asdict(f) for f in verdicts.findings],
        faults=[asdict(i) for i in seen.ledger.injected + seen.ledger.changes],
        forgets=[asdict(f) for f in seen.workload.forgets],
        restores=[asdict(r) for r in restores],
    )
    return Report(
        seed=plan.seed,
        digest=plan.digest(),
        node=plan.node,
        operator=operator_under_test(),
        planned_executions=len(plan.executions),
        planned_faults=len(plan.faults),
        ledger=seen.ledger,
        tally=seen.tally,
        kinds=plan.kinds(),
        verdicts=verdicts,
        agreements=seen.agreements,
        timings=seen.timings,
        bound=options.bound,
        rss_bound_mib=options.rss_bound_mib,
        notes=_notes(seen),
        lives=rig.lives(),
        unreplicated_at=plan.unreplicated_at,
    )


async def _watch_and_run(rig: Rig, plan: plan_.Plan, options: Options) -> _Seen:
    """The checker's watches up, the workload and the faults run, then the end state read."""
    markers: dict[str, str] = {}
    primary = rig.sentinel_set.agreed_primary
    async with kube.Api(rig.cluster) as api:
        workload = Workload(
            plan=plan,
            api=api,
            cluster=rig.cluster,
            namespace=NAMESPACE,
            origin=time.monotonic(),
            markers=markers,
            reuse_patience=options.bound * 0.75,
            prober=Prober(primary=primary, prefix=DEFAULT_PREFIX),
            user_env=rig.user_env,
            replication_held=rig.replication_held,
            holds_done=rig.holds_done,
            gate=rig.user_gate,
        )
        pods_seen = PodObserver(
            api=api,
            namespace=NAMESPACE,
            marker=(lambda name, uid: markers.get(name))
            if plan.node == "kwok"
            else (lambda name, uid: plan_.real_marker(uid)),
            prober=Prober(primary=primary, prefix=DEFAULT_PREFIX),
            on_gone=workload.pod_gone,
        )
        executions_seen = ExecutionObserver(api=api, namespace=NAMESPACE)
        await pods_seen.start()
        await executions_seen.start()
        workload.attach(pods_seen=pods_seen, executions_seen=executions_seen)
        sampler = asyncio.create_task(_supervise(rig), name="soak sampler")
        try:
            return await _run(
                rig,
                plan,
                options,
                workload=workload,
                pods_seen=pods_seen,
                executions_seen=executions_seen,
                sampler=sampler,
            )
        finally:
            await _cancelled(sampler)
            await pods_seen.stop()
            await executions_seen.stop()
            workload.close()


async def _run(
    rig: Rig,
    plan: plan_.Plan,
    options: Options,
    *,
    workload: Workload,
    pods_seen: PodObserver,
    executions_seen: ExecutionObserver,
    sampler: asyncio.Task[None],
) -> _Seen:
    """The workload and the faults at once, the wait for convergence, and the end state, frozen
    and read."""
    timings: dict[str, float] = {}
    await workload.create_swarms()
    origin = workload.origin = time.monotonic()
    injector = Injector(
        rig=rig,
        plan=plan,
        origin=origin,
        refused_waiting=lambda: sum(1 for p in pods_seen.live() if p.refused),
    )
    tally, ledger = await asyncio.gather(workload.run(), injector.run())
    # The bound counts from the last fault or the workload's last create, cancel or delete
    # (not from its waits for a name to be free again).
    calm = origin + max(ledger.end, workload.last_activity)
    timings["workload and faults"] = time.monotonic() - origin
    print(f"soak: {workload.now():7.1f}s workload and faults over; waiting for convergence", flush=True)
    existing = await workload.existing()
    await _converge(pods_seen, executions_seen, existing=existing, deadline=calm + options.bound)
    timings["convergence wait"] = time.monotonic() - calm
    # The end state is frozen before it is read: the operators are stopped where they are
    # (they may still be working when the bound is past), the watches stop, one list
    # gives what they missed, and Redis is read. Nothing an operator does can fall
    # between the list and the read: a Pod it captured and deleted there would look
    # captured but never refused.
    await _cancelled(sampler)
    with rig.operators_paused():
        await pods_seen.stop()
        await executions_seen.stop()
        await pods_seen.resync()
        await executions_seen.resync()
        await pods_seen.settle_probes()
        stored, read_error = await _read(rig.sentinel_set.agreed_primary, plan)
        agreements = (
            await asyncio.to_thread(read_commands_agree, stored, env=rig.redis_env(), sample=READ_SAMPLE)
            if read_error is None
            else []
        )
    return _Seen(
        workload=workload,
        pods_seen=pods_seen,
        executions_seen=executions_seen,
        tally=tally,
        ledger=ledger,
        origin=origin,
        calm=calm,
        stored=stored,
        read_error=read_error,
        agreements=agreements,
        timings=timings,
    )


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _judge(rig: Rig, options: Options, *, seen: _Seen, restores: Sequence[Restore]) -> rules.Verdicts:
    """Every rule's verdicts on what the run saw."""
    pods, executions = seen.pods_seen.pods, seen.executions_seen.executions
    workload, stored, origin = seen.workload, seen.stored, seen.origin
    redis_read = seen.read_error is None
    attributed = rules.attribute(pods, executions, planted=workload.planted)
    losses = seen.ledger.losses(origin=origin)
    verdicts = rules.Verdicts()
    verdicts.counts["worker pods seen"] = len(pods)
    verdicts.extend(
        rules.judge_captures(
            pods,
            stored.captures,
            redis_read=redis_read,
            executions=executions,
            forgotten=rules.forgotten_lives(pods, workload.forgets),
            losses=losses,
        )
    )
    verdicts.extend(rules.judge_deletes(pods, executions=executions, losses=losses))
    verdicts.extend(
        rules.judge_leftovers(
            pods,
            stored.journal,
            planted=workload.planted,
            executions=executions,
            deletes=audit.pod_deletes(rig.plane.workdir / AUDIT_LOG) if rig.plane is not None else {},
        )
    )
    verdicts.extend(rules.judge_convergence(executions, faults_end=seen.calm, bound=options.bound))
    verdicts.extend(rules.judge_operators(rig.lives(), rss_bound_mib=options.rss_bound_mib))
    verdicts.extend(
        rules.judge_names(
            pods,
            stored.captures,
            stored.owners,
            attributed=attributed,
            forgets=workload.forgets,
            restores=restores,
            redis_read=redis_read,
            origin=origin,
        )
    )
    verdicts.extend(rules.judge_done(pods, executions, attributed=attributed, origin=origin))
    verdicts.extend(rules.judge_reapplied(pods, executions, workload.forgets, attributed=attributed))
    verdicts.extend(rules.count_lost_races(pods, workload.lost_race, attributed=attributed))
    return verdicts


def _notes(seen: _Seen) -> list[str]:
    """What the report says beside the verdicts: records that do not parse, a failed end read,
    the checker's broken watches, planted Pods not yet Failed."""
    notes = [f"record that does not parse: {e}" for e in seen.stored.errors]
    if seen.read_error is not None:
        notes.append(f"Redis could not be read at the end: {seen.read_error}")
    pods_breaks, executions_breaks = seen.pods_seen.breaks, seen.executions_seen.breaks
    if pods_breaks or executions_breaks:
        notes.append(
            f"the checker's watches broke {len(pods_breaks)} (Pods) and {len(executions_breaks)} "
            f"(Executions) times and listed again; first: {(pods_breaks + executions_breaks)[:3]}"
        )
    if seen.tally.adopted_not_failed:
        notes.append(
            f"{seen.tally.adopted_not_failed} planted Pods were not seen Failed within 10 s of their create"
        )
    return notes


async def _supervise(rig: Rig) -> None:
    """Read each operator's memory and metrics; start again a replica that died by itself (its
    life keeps the exit code, and rule 6 reports it)."""
    while True:
        for replica in rig.replicas.values():
            life = replica.life
            if life is not None and replica.pid is not None:
                await asyncio.to_thread(sample, life, metrics_port=replica.metrics_port)
            elif replica.died():
                print(f"soak: operator {replica.name} exited by itself; starting it again", flush=True)
                await asyncio.to_thread(replica.ensure_running)
        await asyncio.sleep(SAMPLE_EVERY)


async def _converge(
    pods_seen: PodObserver, executions_seen: ExecutionObserver, *, existing: Set[str], deadline: float
) -> None:
    """Until every Execution converged or went, and no worker Pod is left, or ``deadline``.
    ``existing``: the UIDs of the Executions listed once the workload was over; one the checker's
    watch has not seen yet is not converged (the workload's last create can end it just before
    the watch's event comes).

    Once every Execution has converged, a Pod left is left for good (Done means its cleanup
    finished), so the wait ends 15 s later rather than at the deadline.
    """
    converged_since: float | None = None
    while time.monotonic() < deadline:
        pending = [
            e
            for e in executions_seen.executions.values()
            if e.gone_at is None
            and not e.vanished
            and (e.deleting_at is not None or e.phase not in CONVERGED)
        ]
        if not pending and existing <= executions_seen.executions.keys():
            if not pods_seen.live():
                return
            converged_since = converged_since or time.monotonic()
            if time.monotonic() - converged_since > 15:
                return
        else:
            converged_since = None
        await asyncio.sleep(1.0)


async def _read(primary: Callable[[], redis.Redis], plan: plan_.Plan) -> tuple[Stored, str | None]:
    """The end-of-run read, from the primary the Sentinels agree on; Redis may still be failing
    over from the last fault: retried."""
    last = ""
    for _ in range(30):
        try:
            client = await asyncio.to_thread(primary)
            try:
                stored = await asyncio.to_thread(
                    read_all, client, prefix=DEFAULT_PREFIX, slugs=[s.slug for s in plan.swarms]
                )
            finally:
                client.close()
            return stored, None
        except Exception as error:  # redis-py's errors: any is "could not read".
            last = f"{type(error).__name__}: {error}"
            await asyncio.sleep(1.0)
    return Stored(), last


def _dump(workdir: Path, **tables: list[dict[str, Any]]) -> None:
    """What the checker saw and found, one JSON document per line (``pods.jsonl`` …), for a
    look after the run."""
    for name, rows in tables.items():
        with (workdir / f"{name}.jsonl").open("w") as out:
            for row in rows:
                out.write(json.dumps(row, default=str, sort_keys=True) + "\n")
