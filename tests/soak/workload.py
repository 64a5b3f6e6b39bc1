"""Plays the plan's Executions against the cluster, as users would, straight to the API server
(never through an operator's fault proxy).

Before each Execution exists, the log its worker will print is planted (kwok serves it by Pod
name, ``tests/support/pods.py``): ``worker startup refused: soak-marker-<16 hex> pod <name>``,
with a fresh random marker each time, recorded in :attr:`Workload.markers`, so the checker knows
which marker the Pod it sees next under that name must carry. A name is used again only once no
Pod of that name is left (its marker is planted anew for the next Pod), and a planted log is
removed once its Pod is gone (kwok reads every Logs object on each log request). A Pod deleted is
not gone while the operator's evidence finalizer holds it (it reads the log then).

**refused-adopted** (:meth:`Workload._plant_failed_pod`): the Execution is created, then at once
its worker Pod, owned by the new Execution's UID (its controller reference and the evidence
finalizer, as the operator's create body has them) and already failed: what a launch that crashed
before recording its hand leaves, which the operator adopts. A Pod with the worker's name and
labels but no such owner would be a look-alike the operator never touches. The operator is
running, so its own create sometimes wins: the workload's gets 409, and the Execution's worker is
the operator's own Pod (counted in :attr:`Tally.adopted_lost_race`).

**Forget and apply again** (:attr:`~tests.soak.plan.ExecutionPlan.forget`), as a user does after an
Execution is ``Done`` and its name is wanted again (the ``NameInUse`` condition says how): the
Execution is deleted; once it is gone (the API server answers 404) the name's records are read
(the checker's rule 1 judges the forgotten life by them), and ``python -m agentihooks_swarm records
forget SLUG NAME`` runs with an operator replica's environment, as ``kubectl exec
deployment/...`` runs it (its API server credentials and Redis, through that replica's fault
proxies); then the same name is applied again: a new Execution (a new UID), launched. When forget
refuses (the owning Execution still exists, it cannot ask the API server, Redis is down, the
cleanup is unfinished) the refusal is kept and it runs again 2 s later. A forget never runs while
a ``redis-lost-writes`` fault holds the replicas' links, nor, with ``REDIS_MIN_REPLICAS=0``, from a
``redis-primary-kill`` until the old primary is a replica again: a forget there is acknowledged by a
primary alone and lost with it, which brings the forgotten records back by Redis' own doing; the
failover restore is about what the operator wrote, not what a person removed (docs/redis.md), so
that is not what the soak judges. A name planned ``in_hold`` is applied
again while such a fault holds the links (its new owner claim and first records are then lost in
the failover, and the operator must put back the new life's, never the forgotten one's).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from agentihooks_swarm.kubernetes import owners
from tests.bench import kube
from tests.soak.checker.model import (
    CONVERGED,
    EXECUTION_LABEL,
    OWNER_LABEL,
    OWNER_PREFIX,
    Forgotten,
    PodHistory,
)
from tests.soak.checker.observe import EXECUTIONS, ExecutionObserver, PodObserver, Prober
from tests.soak.plan import MARKER_SH, PROJECT, ExecutionPlan, Plan, RealWorker, TemplateChange
from tests.soak.redis_set import Gate
from tests.support import builders, images, pods
from tests.support.cluster import ClusterError, ControlPlane

GENERATION_LABEL: Final = "swarm.agentihooks.io/generation"
#: On the Pods the workload plants: the UID of the Execution it planted it for (tells its own Pod
#: from the operator's after a create whose answer was lost).
PLANTED_ANNOTATION: Final = "soak.agentihooks.io/planted-for"
#: Logs are planted this long before their Execution is created.
PLANT_LEAD: Final = 3.0
#: How long the soak keeps retrying a request while the API server restarts.
PATIENCE: Final = 120.0
#: A forgotten name's forget runs this long before it is applied again; longer for a name applied
#: again in a hold (its forget must be done, and replicated, before the links are held).
FORGET_LEAD: Final = 6.0
FORGET_LEAD_IN_HOLD: Final = 20.0
#: Between two tries of a refused forget.
FORGET_RETRY: Final = 2.0
#: How long a name planned ``in_hold`` waits for a held link before it is applied anyway.
HOLD_PATIENCE: Final = 30.0


def worker_pod_name(execution: str) -> str:
    """The operator's worker Pod name for an Execution's first attempt (its documented scheme)."""
    return f"swarm-worker-{execution}-1"


def marker_line(*, marker: str, pod: str) -> bytes:
    return f"worker startup refused: soak-marker-{marker} pod {pod}\n".encode()


@dataclass
class Tally:
    created: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    reused: int = 0
    reuse_skipped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    adopted_planted: int = 0
    """refused-adopted Executions whose worker Pod the workload created (owned by the Execution,
    already failed), for the operator to adopt."""
    adopted_lost_race: int = 0
    """refused-adopted Executions whose worker Pod the operator created first (the workload's
    create got 409): the operator's own Pod is their worker, judged like a refused-created one's."""
    adopted_name_in_use: int = 0
    """refused-adopted names used again (Invalid, NameInUse): nothing planted."""
    adopted_not_failed: int = 0
    """Planted refused-adopted Pods not seen Failed within 10 s of their create (timing)."""
    forgotten: int = 0
    """Names forgotten (``records forget`` said the name is free) and applied again."""
    forgotten_in_hold: int = 0
    """Of them, applied again while a redis-lost-writes fault held the replicas' links."""
    forget_refusals: list[str] = field(default_factory=list)
    """Each refusal of ``records forget`` (it was run again later)."""
    forget_waited: int = 0
    """Forgets that waited for the gate (:class:`~tests.soak.redis_set.Gate`): a redis-lost-writes
    hold, or a failover while the primary acknowledges alone."""


class Workload:
    def __init__(
        self,
        *,
        plan: Plan,
        api: kube.Api,
        cluster: ControlPlane,
        namespace: str,
        origin: float,
        markers: dict[str, str],
        reuse_patience: float = 120.0,
        prober: Prober | None = None,
        user_env: Callable[[], Mapping[str, str]] | None = None,
        replication_held: Callable[[], bool] = lambda: False,
        holds_done: Callable[[], int] = lambda: 0,
        gate: Gate | None = None,
    ) -> None:
        self.plan = plan
        self.api = api
        self.cluster = cluster
        self.namespace = namespace
        self.origin = origin
        self.markers = markers
        self.tally = Tally()
        self.reuse_patience = reuse_patience
        #: When (seconds after ``origin``) the workload last created, cancelled or deleted something.
        self.last_activity = 0.0
        #: Pods the soak planted itself (refused-adopted), by UID: the UID of their Execution.
        self.planted: dict[str, str] = {}
        #: refused-adopted Executions (by UID) whose worker Pod the operator created first.
        self.lost_race: set[str] = set()
        self.pods: PodObserver | None = None
        self.executions: ExecutionObserver | None = None
        #: Reads a name's records just before its forget (the checker's reader).
        self.prober = prober
        #: The environment ``records forget`` runs with (an operator replica's).
        self.user_env = user_env
        self.replication_held = replication_held
        self.holds_done = holds_done
        #: Closed while a redis-lost-writes fault holds (or is about to hold) the links: the rig's
        #: (:attr:`tests.soak.rig.Rig.user_gate`); a gate of its own when there is no such fault.
        self.gate = gate or Gate()
        #: The names forgotten and applied again, for the checker.
        self.forgets: list[Forgotten] = []
        self._threads = ThreadPoolExecutor(max_workers=6, thread_name_prefix="soak-plant")
        self._name_locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._janitor: asyncio.Queue[PodHistory] = asyncio.Queue()

    def now(self) -> float:
        return time.monotonic() - self.origin

    def attach(self, *, pods_seen: PodObserver, executions_seen: ExecutionObserver) -> None:
        self.pods = pods_seen
        self.executions = executions_seen

    def pod_gone(self, history: PodHistory) -> None:
        """The checker's watch saw a worker Pod go: its planted log may go too."""
        if not self.real:
            self._janitor.put_nowait(history)

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)

    # -- setup --------------------------------------------------------------------------------

    @property
    def real(self) -> bool:
        return self.plan.node == "real"

    async def create_swarms(self) -> None:
        for swarm in self.plan.swarms:
            body = builders.swarm(
                name=swarm.slug,
                namespace=self.namespace,
                projects=[PROJECT],
                annotations={} if self.real else swarm.annotations,
                startup_deadline_seconds=swarm.startup_deadline_seconds,
            )
            if self.real:
                body["spec"]["worker"].update(real_worker(swarm.real))
            await self._request("POST", f"{EXECUTIONS}/namespaces/{self.namespace}/swarms", body)

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> Tally:
        janitor = asyncio.create_task(self._clean_logs(), name="soak janitor")
        try:
            changes = [asyncio.create_task(self._change(change)) for change in self.plan.changes]
            for execution in sorted(self.plan.executions, key=_start):
                await asyncio.sleep(max(_start(execution) - self.now(), 0))
                task = asyncio.create_task(self._play(execution), name=f"play {execution.name}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            await asyncio.gather(*changes)
        finally:
            janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await janitor
        return self.tally

    async def _play(self, execution: ExecutionPlan) -> None:
        try:
            if execution.incarnation and not await self._ready_for_reuse(execution):
                return
            forgotten = await self._forget(execution) if execution.forget else None
            if execution.forget and forgotten is None:
                return
            pod = worker_pod_name(execution.name)
            if not self.real:
                await self._plant(pod)
            await asyncio.sleep(max(execution.at - self.now(), 0))
            if execution.in_hold is not None:
                await self._until_held(execution.in_hold)
            held = self.replication_held()
            body = builders.execution(
                name=execution.name,
                namespace=self.namespace,
                swarm=execution.swarm,
                project=execution.project,
            )
            # A 409: an earlier try whose answer was lost (the API server restarting) created it.
            created = await self._request(
                "POST", f"{EXECUTIONS}/namespaces/{self.namespace}/executions", body, ok=(201, 409)
            )
            created_at = time.monotonic()
            uid = str((created.get("metadata") or {}).get("uid") or "") or await self._uid(execution)
            if execution.kind == "refused-adopted" and execution.incarnation and not execution.forget:
                # A name used again is Invalid (NameInUse) and never launched: no launch leaves a
                # Pod of it, so none is planted (the operator would rightly never take one on).
                self.tally.adopted_name_in_use += 1
            elif execution.kind == "refused-adopted":
                await self._plant_failed_pod(execution, pod, owner_uid=uid)
            if forgotten is not None:
                forgotten.new_uid = uid or None
                forgotten.applied_at = time.monotonic()
                forgotten.in_hold = held and self.replication_held()
                self.tally.forgotten_in_hold += int(forgotten.in_hold)
            self.tally.created[execution.kind] += 1
            self.last_activity = self.now()
            if execution.incarnation:
                self.tally.reused += 1
            if execution.action is not None:
                await asyncio.sleep(max(created_at + execution.action_after - time.monotonic(), 0))
                await self._act(execution)
        except (kube.ApiError, ClusterError, OSError, TimeoutError) as error:
            self.tally.failures.append(f"{execution.name}: {type(error).__name__}: {str(error)[:300]}")

    async def _act(self, execution: ExecutionPlan) -> None:
        path = f"{EXECUTIONS}/namespaces/{self.namespace}/executions/{execution.name}"
        if execution.action == "cancel":
            await self._request(
                "PATCH",
                path,
                {"spec": {"cancel": True}},
                content_type="application/merge-patch+json",
                ok=(200, 404),
            )
        else:
            await self._request("DELETE", path, ok=(200, 202, 404))
        self.tally.actions[str(execution.action)] += 1
        self.last_activity = self.now()

    async def _ready_for_reuse(self, execution: ExecutionPlan) -> bool:
        """Wait for the name's first Execution to end, delete it, and wait until it and its Pod
        are gone. False (and why) when that does not happen within REUSE_PATIENCE."""
        assert self.executions is not None and self.pods is not None
        deadline = time.monotonic() + self.reuse_patience
        path = f"{EXECUTIONS}/namespaces/{self.namespace}/executions/{execution.name}"
        pod = worker_pod_name(execution.name)

        def state() -> str:
            assert self.executions is not None and self.pods is not None
            earlier = self.executions.by_name(execution.name)
            if earlier is None:
                return "not seen"
            if earlier.gone_at is None and not earlier.vanished:
                return (
                    "ended" if earlier.phase in CONVERGED or earlier.deleting_at else f"phase {earlier.phase}"
                )
            if any(p.name == pod for p in self.pods.live()):
                return "its pod is left"
            return "gone"

        deleted = False
        while (now := state()) != "gone":
            if now == "ended" and not deleted:
                await self._request("DELETE", path, ok=(200, 202, 404))
                deleted = True
            if time.monotonic() > deadline:
                self.tally.reuse_skipped.append(f"{execution.name}: {now} after {self.reuse_patience:.0f}s")
                return False
            await asyncio.sleep(0.5)
        return True

    def _gave_up(self, execution: ExecutionPlan, *, deadline: float, after: str, why: str) -> bool:
        """Past ``deadline``: the name is not used again, and the tally says ``why``."""
        if time.monotonic() <= deadline:
            return False
        self.tally.reuse_skipped.append(
            f"{execution.name}: not forgotten {after} {self.reuse_patience:.0f}s: {why}"
        )
        return True

    async def _forget(self, execution: ExecutionPlan) -> Forgotten | None:
        """The name's earlier Execution is gone (:meth:`_ready_for_reuse`): make sure the API
        server says so (404), read its records, and run ``records forget`` until the name is free
        (None, and why, when it is not within the reuse patience)."""
        assert self.executions is not None and self.prober is not None and self.user_env is not None
        earlier = self.executions.by_name(execution.name)
        old_uid = earlier.uid if earlier is not None else ""
        path = f"{EXECUTIONS}/namespaces/{self.namespace}/executions/{execution.name}"
        deadline = time.monotonic() + self.reuse_patience
        await asyncio.sleep(max(execution.at - _forget_lead(execution) - self.now(), 0))
        refusals: list[str] = []
        while True:
            if self._gave_up(execution, deadline=deadline, after="after", why="its Execution still exists"):
                return None
            answer = await self._request("GET", path, ok=(200, 404))
            if answer.get("kind") == "Status" and answer.get("code") == 404:
                break
            await asyncio.sleep(0.5)
        read = await self.prober.read(slug=execution.swarm, execution=execution.name)
        read_at = time.monotonic()
        while True:
            why = refusals[-1] if refusals else "a redis-lost-writes fault held the links"
            if self._gave_up(execution, deadline=deadline, after="within", why=why):
                return None
            entered = self.gate.enter()
            if not entered:
                self.tally.forget_waited += 1
                entered = await _until(self.gate.enter, timeout=PATIENCE)  # In once it says so.
            if not entered:
                continue  # The deadline above says it.
            try:
                code, said = await self._run_forget(slug=execution.swarm, name=execution.name)
            finally:
                self.gate.leave()
            if code == 0:
                break
            refusals.append(f"exit {code}: {said}")
            self.tally.forget_refusals.append(f"{execution.name}: exit {code}: {said}")
            await asyncio.sleep(FORGET_RETRY)
        forgotten = Forgotten(
            slug=execution.swarm,
            name=execution.name,
            old_uid=old_uid,
            forgotten_at=time.monotonic(),
            before=read[0] if read is not None else None,
            read_at=read_at,
            owner_before=read[1] if read is not None else None,
            refusals=refusals,
        )
        self.forgets.append(forgotten)
        self.tally.forgotten += 1
        return forgotten

    async def _run_forget(self, *, slug: str, name: str) -> tuple[int, str]:
        """``python -m agentihooks_swarm records forget SLUG NAME --requested-by soak`` with an
        operator's environment: its exit code, and what it said (its last line)."""
        assert self.user_env is not None
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentihooks_swarm",
            "records",
            "forget",
            slug,
            name,
            "--requested-by",
            "soak",
            env=dict(self.user_env()),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
        except TimeoutError:
            process.kill()
            await process.wait()
            return -1, "no answer within 60s"
        lines = out.decode(errors="replace").strip().splitlines()
        return int(process.returncode or 0), (lines[-1] if lines else "")[:300]

    async def _until_held(self, index: int) -> None:
        """Until the redis-lost-writes fault of ``index`` holds the replicas' links: at once when
        its hold is over (it came early, or this step late), else within HOLD_PATIENCE."""
        await _until(lambda: self.replication_held() or self.holds_done() > index, timeout=HOLD_PATIENCE)

    async def existing(self) -> set[str]:
        """The UIDs of the Executions that exist now (one list): once the workload is over, the
        ones the convergence wait must see converge or go (the checker's watch may not have seen
        the last ones created yet, and never sees one created and deleted while it was broken)."""
        listed = await self._request("GET", f"{EXECUTIONS}/namespaces/{self.namespace}/executions")
        return {str((item.get("metadata") or {}).get("uid") or "") for item in listed.get("items") or []}

    async def _uid(self, execution: ExecutionPlan) -> str:
        """The UID of the Execution an earlier try of the create made (its answer was lost); ""
        when it is already gone."""
        path = f"{EXECUTIONS}/namespaces/{self.namespace}/executions/{execution.name}"
        found = await self._request("GET", path, ok=(200, 404))
        return str((found.get("metadata") or {}).get("uid") or "") if found.get("kind") != "Status" else ""

    async def _plant_failed_pod(self, execution: ExecutionPlan, pod: str, *, owner_uid: str) -> None:
        """The worker Pod of a refused-adopted Execution, created just after the Execution, owned
        by it (its controller reference and the evidence finalizer, as the operator's create body
        has them) and already failed: the Pod a launch that crashed before recording its hand
        leaves. The operator is running, so its own create may come first: then the workload's
        gets 409 and the operator's Pod is the worker (:attr:`Tally.adopted_lost_race`)."""
        assert self.pods is not None
        if not owner_uid:
            self.tally.failures.append(f"{execution.name}: its Execution was gone before its Pod was planted")
            return
        body = pods.worker_pod(
            name=pod,
            namespace=self.namespace,
            phase="Failed",
            exit_code=execution.exit_code,
            labels={
                OWNER_LABEL: OWNER_PREFIX + execution.swarm,
                EXECUTION_LABEL: execution.name,
                GENERATION_LABEL: "1",
            },
            annotations={PLANTED_ANNOTATION: owner_uid},
            image=images.BUSYBOX_REF if self.real else pods.WORKER_IMAGE,
            owner_references=[owners.execution_reference(name=execution.name, uid=owner_uid)],
            finalizers=[owners.EVIDENCE_FINALIZER],
        )
        if self.real:  # The container prints its marker and exits as planned.
            [container] = body["spec"]["containers"]
            container["command"] = ["/bin/sh", "-c", MARKER_SH + f"exit {execution.exit_code}"]
            container["env"] = _POD_ENV
        uid = await self._create_pod(pod, body)
        if uid is None:
            self.lost_race.add(owner_uid)
            self.tally.adopted_lost_race += 1
            return
        self.planted[uid] = owner_uid
        self.tally.adopted_planted += 1
        # Watched aside: the Execution's cancel or delete keeps its planned moment.
        task = asyncio.create_task(self._until_failed(uid), name=f"failed {pod}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _until_failed(self, uid: str) -> None:
        """Counts a planted Pod the checker has not seen Failed within 10 s (timing)."""
        assert self.pods is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = self.pods.pods.get(uid)
            if found is not None and (found.refused or found.refused_after_delete):
                return
            await asyncio.sleep(0.1)
        self.tally.adopted_not_failed += 1

    async def _create_pod(self, name: str, body: Mapping[str, Any]) -> str | None:
        """POST ``body``: the new Pod's UID, or None when the operator's Pod of that name was there
        first (409). A try whose answer was lost may have made the Pod itself: a 409 after one is
        told apart by :data:`PLANTED_ANNOTATION` (a Pod already gone by then cannot be told, and
        is counted as the operator's; the checker attributes it by its controller reference)."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        deadline = time.monotonic() + PATIENCE
        uncertain = False
        while True:
            try:
                created = await self.api.request("POST", path, body, ok=(201, 409), attempts=1)
                break
            except kube.ApiError as error:
                if time.monotonic() > deadline or not _transient(str(error)):
                    raise
                uncertain = True
                await asyncio.sleep(1.0)
        if created.get("kind") != "Status":
            return str(created["metadata"]["uid"])
        if not uncertain:
            return None
        found = await self._request("GET", f"{path}/{name}", ok=(200, 404))
        mine = ((found.get("metadata") or {}).get("annotations") or {}).get(PLANTED_ANNOTATION)
        if found.get("kind") != "Status" and mine == body["metadata"]["annotations"][PLANTED_ANNOTATION]:
            return str(found["metadata"]["uid"])
        return None

    async def _change(self, change: TemplateChange) -> None:
        await asyncio.sleep(max(change.at - self.now(), 0))
        path = f"{EXECUTIONS}/namespaces/{self.namespace}/swarms/{change.swarm}"
        current = await self._request("GET", path)
        if self.real:
            worker: dict[str, Any] = dict(real_worker(change.real))
        else:
            old = ((current.get("spec") or {}).get("worker") or {}).get("annotations") or {}
            annotations: dict[str, Any] = {k: None for k in old if k not in change.annotations}
            annotations.update(change.annotations)
            worker = {"annotations": annotations}
        await self._request(
            "PATCH",
            path,
            {"spec": {"worker": worker}},
            content_type="application/merge-patch+json",
        )
        self.tally.actions["template changed"] += 1
        print(f"soak: {self.now():7.1f}s Swarm {change.swarm}'s template changed", flush=True)

    # -- planted logs -------------------------------------------------------------------------

    def _lock(self, pod: str) -> asyncio.Lock:
        return self._name_locks.setdefault(pod, asyncio.Lock())

    async def _plant(self, pod: str) -> None:
        marker = secrets.token_hex(8)
        async with self._lock(pod):
            self.markers[pod] = marker
            content = marker_line(marker=marker, pod=pod)
            loop = asyncio.get_running_loop()
            deadline = time.monotonic() + PATIENCE
            while True:
                try:
                    await loop.run_in_executor(self._threads, self._plant_blocking, pod, content)
                    return
                except (ClusterError, OSError) as error:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(1.0)
                    del error

    def _plant_blocking(self, pod: str, content: bytes) -> None:
        pods.plant_log_blocking(
            cluster=self.cluster,
            namespace=self.namespace,
            pod=pod,
            container="worker",
            content=content,
            timeout=60,
        )

    async def _clean_logs(self) -> None:
        """Remove a gone Pod's planted log, unless its name has a newer one or a live Pod."""
        assert self.pods is not None
        while True:
            history = await self._janitor.get()
            async with self._lock(history.name):
                if self.markers.get(history.name) != history.marker:
                    continue
                if any(p.name == history.name for p in self.pods.live()):
                    continue
                with contextlib.suppress(kube.ApiError):
                    await self.api.request(
                        "DELETE",
                        f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{self.namespace}/logs/{history.name}",
                        ok=(200, 202, 404),
                        attempts=3,
                    )
                    directory = self.cluster.pod_logs_dir / self.namespace / history.name
                    for path in directory.glob("*"):
                        path.unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        directory.rmdir()

    # -- requests -----------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        ok: tuple[int, ...] = (200, 201),
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """A request retried for PATIENCE seconds (the API server may be restarting)."""
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                return await self.api.request(
                    method, path, body, ok=ok, content_type=content_type, attempts=4
                )
            except kube.ApiError as error:
                if time.monotonic() > deadline or not _transient(str(error)):
                    raise
                await asyncio.sleep(1.0)


async def _until(condition: Callable[[], bool], *, timeout: float) -> bool:
    """Until ``condition()`` (a thread's flag: polled), or ``timeout``; whether it came."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)


def _start(execution: ExecutionPlan) -> float:
    """When the workload takes an Execution up: its log planted first, and before that its name's
    forget."""
    return execution.at - PLANT_LEAD - _forget_lead(execution)


def _forget_lead(execution: ExecutionPlan) -> float:
    if not execution.forget:
        return 0.0
    return FORGET_LEAD_IN_HOLD if execution.in_hold is not None else FORGET_LEAD


_POD_ENV: Final = [
    {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
]


def real_worker(worker: RealWorker) -> dict[str, Any]:
    """A Swarm's worker template on the real node: busybox printing its marker, then the script
    (or an image that cannot be pulled, or an env variable from a Secret that does not exist)."""
    env: list[dict[str, Any]] = list(_POD_ENV)
    if worker.missing_secret:
        env.append(
            {
                "name": "SOAK_SECRET",
                "valueFrom": {"secretKeyRef": {"name": "swarm-worker-soak-missing", "key": "value"}},
            }
        )
    return {
        "image": worker.image or images.BUSYBOX_REF,
        "command": ["/bin/sh", "-c", MARKER_SH + worker.script],
        "env": env,
        "resources": {"limits": {"memory": worker.memory}} if worker.memory else {},
        # busybox runs as root; the operator's Pod runs as non-root: the template names a user.
        "securityContext": {"runAsUser": 65532},
    }


def _transient(message: str) -> bool:
    """A failure the API server's restart explains: no connection, 429 or 5xx."""
    return any(
        part in message
        for part in (
            "Error:",
            "429",
            " 500 ",
            " 502 ",
            " 503 ",
            " 504 ",
            "Connect",
            "Disconnected",
            "Timeout",
        )
    )
