"""One measured run: a scenario at one N in one mode, on a fresh namespace with a fresh operator.

Scenario A (refused at launch): what a launch that stopped before recording its hand leaves,
found by an operator that starts. With no operator running, N Executions for a project outside
the Swarm's registration are created, then each one's worker Pod is planted as the launch makes
it: owned by its Execution (a controller ownerReference by UID) and, when the operator under test
releases it, carrying the evidence finalizer (:func:`makes_owned_pods`), already Failed with exit
78 and the planted log line. Once every Pod is Failed the operator starts; it adopts each Pod (its
Execution owns it), the hand is refused (``project_unpermitted``) and launch removal captures,
stores (capture mode), deletes and releases the finalizer.

A's clock starts when the operator has started: the bench sees its ``agentihooks-swarm started``
line (logged once its Lease is decided, as its tasks start; polled every 0.1 s), so the
interpreter's imports are not in the wall time. Every Pod is refused from that moment (all of
them are there already), so each Pod's latency is from the operator's start to its evidence, and
the wall time is from the start to the last evidence. The operator's requests and Redis commands
are counted from its process start (nothing is left out: its work starts at once); its start-up's
lists are per operator (:func:`tests.bench.measure.operator_wide`).

Scenario B (failed after a successful hand): N Executions of a Swarm whose worker template makes
kwok run the Pod briefly and fail it with 78; the worker Pods' watch wakes its Execution, whose
step's final cleanup captures, deletes and writes ``attempt-retained``.

Modes: ``capture`` is the operator's production wiring; ``baseline`` is the same operator with a
runtime assembled by ``tests.bench.controller`` whose startup capture captures nothing (plain
UID-pinned deletes, no log read, no record). Both run as ``python -m tests.bench.controller``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import redis

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import labels, owners
from tests.bench import kube, measure
from tests.support import builders, pods
from tests.support.cluster import ClusterError, ControlPlane, build, named_cluster, start
from tests.support.operator_process import READY_LINE, OperatorProcess
from tests.support.proxy import WATCH_QUERY, Call, FaultProxy
from tests.support.redis_server import RedisServer

Scenario = Literal["A", "B"]
Mode = Literal["capture", "baseline"]

PLANTED: Final = b"worker startup refused: planted kind refusal\n"
SLUG: Final = "bench"
PREFIX: Final = "agentihooks-swarm"
#: The chart's defaults (values.yaml), instead of OperatorProcess's test-speed ones.
CHART_DEFAULTS: Final = {
    "AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "10",
    "AGENTIHOOKS_SWARM_API_TIMEOUT_SECONDS": "10",
    "AGENTIHOOKS_SWARM_LEASE_DURATION_SECONDS": "15",
}
#: How long B's workers run before kwok fails them with exit 78.
RUN_FOR: Final = "2s"
#: Executions (and planted Pods) created at most this many at a time.
CREATE_PARALLELISM: Final = 16
#: The operator is settled when no request but watches and the Lease came for this long.
QUIET_SECONDS: Final = 3.0
#: A run gives up when nothing moved for this long (it then reports what it saw).
STALL_SECONDS: Final = 60.0


REPO: Final = Path(__file__).resolve().parents[2]


def controller_root(*, source: Path, repo: Path) -> Path:
    """Where REV's operator is started from: REV's own ``tests/bench/controller.py`` when it has
    one (its baseline matches its operator), else the working tree's."""
    return source if (source / "tests" / "bench" / "controller.py").exists() else repo


def python_path(*, source: Path, existing: str | None) -> str:
    """PYTHONPATH that puts REV's ``operator/`` ahead of the venv's editable install of the
    working tree (which a ``.pth`` adds after PYTHONPATH)."""
    return os.pathsep.join([str(source / "operator"), *([existing] if existing else [])])


class BenchOperator(OperatorProcess):
    """The operator's handlers and wiring as the chart runs them (standalone, without ``--verbose``),
    started by ``tests.bench.controller`` so the baseline can be assembled in the bench."""

    def __init__(
        self,
        *,
        baseline: bool = False,
        tracemalloc: Path | None = None,
        source: Path | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.baseline = baseline
        self.tracemalloc = tracemalloc
        #: A worktree of another revision whose operator runs instead of the working tree's.
        self.source = source

    def environment(self) -> dict[str, str]:
        env = super().environment()
        if self.source is not None:
            env["PYTHONPATH"] = python_path(source=self.source, existing=env.get("PYTHONPATH"))
        return env

    def start(self, *, timeout: float = 30.0) -> None:
        if self.running:
            raise RuntimeError("the operator is already running")
        if self.namespace is None:
            raise ValueError("tests.bench.controller watches one namespace: give the operator one")
        args = [sys.executable, "-m", "tests.bench.controller", "--namespace", self.namespace]
        if self.baseline:
            args.append("--baseline")
        if self.tracemalloc is not None:
            args.extend(["--tracemalloc", str(self.tracemalloc)])
        self.starts += 1
        with self.log_path.open("ab") as log:
            where = "" if self.source is None else f" (operator from {self.source / 'operator'})"
            log.write(f"\n===== start {self.starts}{where}: {' '.join(args)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
                cwd=REPO if self.source is None else controller_root(source=self.source, repo=REPO),
            )
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.log():
            if self.popen.poll() is not None:
                raise RuntimeError(f"the operator exited with {self.popen.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                os.killpg(self.popen.pid, signal.SIGKILL)
                raise TimeoutError(f"the operator did not start within {timeout}s:\n{self.tail()}")
            time.sleep(0.1)


@dataclass
class Result:
    scenario: Scenario
    mode: Mode
    n: int
    namespace: str
    complete: bool
    """Every Pod gone (and in capture mode every record stored) before the run gave up."""
    wall_seconds: float
    pods_gone: int
    records: int
    latency_record: list[float]
    """Refusal to record stored, per Execution (capture mode)."""
    latency_gone: list[float]
    """Refusal to Pod gone, per Execution (both modes)."""
    settle_seconds: float
    """From the first Execution to the operator going quiet with every Execution Done."""
    api_per_pod: dict[str, float]
    api_operator_wide: dict[str, int]
    redis_per_pod: dict[str, float]
    record_bytes: float
    """Mean size of the scenario's records (A: attempt-startup-diagnostics, B: attempt-retained)."""
    redis_used_memory: int
    redis_memory_delta: int
    peak_rss_mib: float
    cpu_seconds: float
    create_seconds: float
    """How long creating the N Executions took (B: they arrive over this time, within the wall time;
    A: before the operator starts, outside it)."""
    rss_end_mib: float = 0.0
    """VmRSS when the operator is stopped (next to the peak: held, or a passing spike?)."""
    cpu_window: dict[str, float] = field(default_factory=dict)
    """CPU seconds each process of the machine spent from the first Execution until settled."""
    machine_busy: float = 0.0
    """The machine's busy share of both CPUs over the same window (0..1)."""
    watch_lag_max: float | None = None
    """B: the largest gap between a container's ``finishedAt`` (whole seconds) and the bench seeing Failed."""
    notes: list[str] = field(default_factory=list)
    repeat: int = 0
    """Which of the configuration's runs this is (each capture run sits next to its baseline run)."""
    evidence_last: float | None = None
    """From the first refusal to the last evidence: record stored (capture), Pod gone (baseline)."""
    revision: str = ""
    """``--against``: the short hash of the revision whose operator ran; empty for the working tree."""
    planted_finalizer: bool | None = None
    """A: whether the planted Pods carried the evidence finalizer (only where the run's operator
    releases it, :func:`makes_owned_pods`); None in B, whose Pods the operator makes."""

    @property
    def throughput(self) -> float:
        return self.pods_gone / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def key(self) -> tuple[Scenario, int, Mode]:
        return (self.scenario, self.n, self.mode)


def execution_names(n: int) -> list[str]:
    return [f"x{i:05d}" for i in range(n)]


def pod_name(execution: str) -> str:
    return labels.worker_pod_name(execution=execution, generation=1)


#: Where an operator's source keeps the evidence finalizer (and its ownerReferences) if it has one.
OWNERS_MODULE: Final = Path("operator") / "agentihooks_swarm" / "kubernetes" / "owners.py"


def makes_owned_pods(source: Path) -> bool:
    """Whether the operator in ``source`` (a checkout) puts the evidence finalizer on its worker Pods
    and releases it. An older operator deletes a Pod but never releases a finalizer it does not know,
    so a Pod planted with one would stay Terminating and never be gone."""
    return (source / OWNERS_MODULE).exists()


def planted_pod(*, namespace: str, execution: str, uid: str, finalizer: bool) -> dict[str, Any]:
    """Scenario A's worker Pod of ``execution`` (UID ``uid``) as its launch left it: owned by the
    Execution, Failed with 78; with the evidence finalizer when the operator under test releases it."""
    return pods.worker_pod(
        name=pod_name(execution),
        namespace=namespace,
        phase="Failed",
        exit_code=78,
        reason="Error",
        labels=labels.attempt(slug=SLUG, execution=execution, generation=1),
        owner_references=[owners.execution_reference(name=execution, uid=uid)],
        finalizers=[owners.EVIDENCE_FINALIZER] if finalizer else (),
    )


async def create_namespace(api: kube.Api, *, name: str) -> str:
    """A new namespace ``name``, once its ``default`` ServiceAccount exists."""
    await api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    for _ in range(300):  # The ServiceAccount admission plugin needs `default` before any Pod.
        try:
            await api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default", attempts=1)
            return name
        except kube.ApiError:
            await asyncio.sleep(0.1)
    raise kube.ApiError(f"namespace {name}: no default ServiceAccount after 30s")


async def plant_failed_pods(
    api: kube.Api, observer: kube.Observer, *, namespace: str, owners_: dict[str, str], finalizer: bool
) -> None:
    """Scenario A: each Execution's worker Pod (``owners_``: Execution name to UID) as its launch
    left it (:func:`planted_pod`); returns once every one is Failed."""
    executions = list(owners_)

    async def create(index: int) -> None:
        execution = executions[index]
        body = planted_pod(
            namespace=namespace, execution=execution, uid=owners_[execution], finalizer=finalizer
        )
        await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    await kube.bounded(len(executions), CREATE_PARALLELISM, create)
    names = [pod_name(e) for e in executions]
    deadline = time.monotonic() + 60 + len(names) / 10
    while sum(1 for n in names if (s := observer.pods.get(n)) is not None and s.failed_at) < len(names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"planted Pods in {namespace} did not all reach Failed")
        await asyncio.sleep(0.5)


def _swarms(namespace: str) -> str:
    return f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/swarms"


async def create_executions(
    api: kube.Api, *, namespace: str, executions: list[str], project: str, sent: list[float] | None = None
) -> dict[str, str]:
    """The Executions of the bench's Swarm, :data:`CREATE_PARALLELISM` at a time; ``sent[i]``: when
    the i-th was sent. Returns each one's UID by name, in ``executions``' order."""
    uids: dict[str, str] = {}
    path = f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/executions"

    async def create(index: int) -> None:
        name = executions[index]
        body = builders.execution(name=name, namespace=namespace, swarm=SLUG, project=project)
        uids[name] = str((await api.request("POST", path, body))["metadata"]["uid"])

    await kube.bounded(len(executions), CREATE_PARALLELISM, create, at=sent)
    return {name: uids[name] for name in executions}


async def refused_burst(
    api: kube.Api,
    observer: kube.Observer,
    *,
    cluster: ControlPlane,
    namespace: str,
    executions: list[str],
    finalizer: bool,
) -> float:
    """Scenario A's burst, with no operator running: the Swarm, the Executions for a project outside
    its registration (first: nothing steps them yet), then the Failed Pods their launches left
    (:func:`plant_failed_pods`). Returns how long creating the Executions took."""
    await pods.plant_shared_log(
        cluster=cluster,
        namespace=namespace,
        pods=[pod_name(e) for e in executions],
        container="worker",
        content=PLANTED,
    )
    swarm = builders.swarm(name=SLUG, namespace=namespace, projects=["registered"])
    await api.request("POST", _swarms(namespace), swarm)
    began = time.time()
    uids = await create_executions(
        api, namespace=namespace, executions=executions, project="outside-the-registration"
    )
    created_in = time.time() - began
    await plant_failed_pods(api, observer, namespace=namespace, owners_=uids, finalizer=finalizer)
    return created_in


class Run:
    """Everything one run needs; :meth:`perform` does it and returns the figures."""

    def __init__(
        self,
        *,
        cluster: ControlPlane,
        redis_server: RedisServer,
        workdir: Path,
        scenario: Scenario,
        mode: Mode,
        n: int,
        profile: bool = False,
        repeat: int = 0,
        source: Path | None = None,
        revision: str = "",
    ) -> None:
        self.profile = profile
        self.repeat = repeat
        #: ``--against``: REV's worktree and short hash (its operator runs); None and "" otherwise.
        self.source = source
        self.revision = revision
        self.cluster = cluster
        self.redis_server = redis_server
        self.workdir = workdir
        self.scenario: Scenario = scenario
        self.mode: Mode = mode
        self.n = n
        self.executions = execution_names(n)
        self.namespace: str | None = None
        self.redis = redis.Redis(host="127.0.0.1", port=redis_server.port, decode_responses=True)
        #: A: whether the planted Pods carry the evidence finalizer (the operator under test releases it).
        self.finalizer = makes_owned_pods(REPO if source is None else source)
        self.record_key = store_.key(
            PREFIX, SLUG, store_.STARTUP_DIAGNOSTICS if scenario == "A" else store_.RETAINED
        )

    @property
    def label(self) -> str:
        side = f"-{self.revision}" if self.revision else ""
        return f"{self.scenario}-{self.mode}-{self.n}-r{self.repeat}{side}"

    async def perform(self) -> Result:
        async with kube.Api(self.cluster) as api:
            side = "-rev" if self.revision else ""
            name = f"bench-{self.scenario.lower()}-{self.mode[:4]}-{self.n}{side}-{uuid.uuid4().hex[:5]}"
            namespace = self.namespace = await create_namespace(api, name=name)
            observer = kube.Observer(api=api, namespace=namespace)
            await observer.start()
            try:
                return await self._measure(api, observer, namespace)
            finally:
                await observer.stop()
                self.redis.close()

    async def _measure(self, api: kube.Api, observer: kube.Observer, namespace: str) -> Result:
        created_in = 0.0
        if self.scenario == "A":
            created_in = await refused_burst(
                api,
                observer,
                cluster=self.cluster,
                namespace=namespace,
                executions=self.executions,
                finalizer=self.finalizer,
            )
        else:
            await pods.plant_shared_log(
                cluster=self.cluster,
                namespace=namespace,
                pods=[pod_name(e) for e in self.executions],
                container="worker",
                content=PLANTED,
            )
            behaviour = pods.protocol_annotations(
                phase="Failed", exit_code=78, reason="Error", run_for=RUN_FOR
            )
            swarm = builders.swarm(name=SLUG, namespace=namespace, annotations=behaviour)
            await api.request("POST", _swarms(namespace), swarm)

        self.redis.flushall()
        memory_before = int(self.redis.info("memory")["used_memory"])
        monitor = measure.Monitor(port=self.redis_server.port, path=self.workdir / f"{self.label}.monitor")
        proxy = FaultProxy(upstream=self.cluster.server, ca_file=self.cluster.ca_file).start_in_thread()
        operator = BenchOperator(
            baseline=self.mode == "baseline",
            kubeconfig=proxy.kubeconfig(
                token=self.cluster.admin_token,
                path=self.workdir / f"{self.label}.kubeconfig",
                namespace=namespace,
            ),
            redis_url=self.redis_server.url,
            namespace=namespace,
            log_path=self.workdir / f"{self.label}.operator.log",
            env=CHART_DEFAULTS,
            source=self.source,
        )
        profiler: subprocess.Popen[bytes] | None = None
        apiserver: measure.ApiserverProfile | None = None
        try:
            if self.scenario == "A":  # Its work starts with it: every Redis command counts from here.
                self.redis.config_resetstat()
            operator.start()
            started = time.time()
            if self.profile and operator.popen is not None:
                profiler = _py_spy(operator.popen.pid, self.workdir / f"{self.label}.py-spy.txt")
            if self.profile:
                apiserver = measure.ApiserverProfile(plane=self.cluster, prefix=self.workdir / self.label)
            return await self._drive(
                api,
                observer,
                namespace,
                proxy,
                operator,
                monitor,
                memory_before,
                started=started if self.scenario == "A" else None,
                created_in=created_in,
            )
        finally:
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(timeout=60)
            if apiserver is not None:
                apiserver.stop()
            operator.stop()
            proxy.stop_thread()
            monitor.stop()

    async def _drive(
        self,
        api: kube.Api,
        observer: kube.Observer,
        namespace: str,
        proxy: FaultProxy,
        operator: OperatorProcess,
        monitor: measure.Monitor,
        memory_before: int,
        *,
        started: float | None = None,
        created_in: float = 0.0,
    ) -> Result:
        """Measure until settled. ``started`` (A): when the operator started, with every Execution
        and Pod in place: the clock starts there and every request since the process started counts.
        Without it (B) the Executions are created now, once the operator's start-up is over."""
        assert operator.popen is not None
        sent = [0.0] * self.n
        if started is None:
            # Count from when the operator watches Executions and its start-up discovery is over.
            await proxy.wait_for_count(path=r".*/executions", query=WATCH_QUERY, timeout=30)
            await asyncio.sleep(1.0)
            mark = len(proxy.calls())
            self.redis.config_resetstat()
        else:
            mark = 0
        meter = measure.CpuMeter(
            pids={
                "operator": operator.popen.pid,
                "bench (proxy, watches, creates)": os.getpid(),
                "redis-server": self.redis_server.pid or 0,
                **{child.name: child.pid for child in self.cluster.children},
            }
        )
        meter.start()
        if started is None:
            began = time.time()
            await self._create_executions(api, namespace=namespace, sent=sent)
            created_in = time.time() - began
        else:
            began = started
            sent = [started] * self.n  # Every worker was refused before the operator started.
        complete = await self._until_settled(observer, proxy=proxy, operator=operator, mark=mark)
        settled = time.time()
        cpu_window, busy_share = meter.stop()
        return self._result(
            observer,
            namespace=namespace,
            operator=operator,
            monitor=monitor,
            window=proxy.calls()[mark:],
            sent=sent,
            began=began,
            settled=settled,
            complete=complete,
            created_in=created_in,
            memory_before=memory_before,
            cpu_window=cpu_window,
            busy_share=busy_share,
        )

    def _result(
        self,
        observer: kube.Observer,
        *,
        namespace: str,
        operator: OperatorProcess,
        monitor: measure.Monitor,
        window: list[Call],
        sent: list[float],
        began: float,
        settled: float,
        complete: bool,
        created_in: float,
        memory_before: int,
        cpu_window: dict[str, float],
        busy_share: float,
    ) -> Result:
        """Read what the settled run left (the operator's figures, Redis, the watch's times), stop
        the operator and the monitor, and put the run's figures together."""
        assert operator.popen is not None
        figures = measure.process_figures(operator.popen.pid)
        commands = measure.command_calls(self.redis)
        memory_after = int(self.redis.info("memory")["used_memory"])
        sizes = measure.record_sizes(self.redis, self.record_key)
        operator.stop()
        monitor.stop()

        capture = self.mode == "capture"
        stored_at = monitor.writes(command="hsetnx" if self.scenario == "A" else "hset", key=self.record_key)
        times = self._times(observer, sent=sent, stored_at=stored_at)
        ends = list(times.gone_at.values()) + (list(stored_at.values()) if capture else [])
        notes: list[str] = []
        if not complete:
            notes.append(
                f"incomplete: {len(times.gone_at)}/{self.n} Pods gone, {len(stored_at)}/{self.n} records"
                f" after {settled - began:.0f}s"
            )
        notes.extend(f"watch: {e}" for e in observer.errors)
        return Result(
            scenario=self.scenario,
            mode=self.mode,
            n=self.n,
            namespace=namespace,
            complete=complete,
            wall_seconds=(max(ends) - began) if ends else settled - began,
            pods_gone=len(times.gone_at),
            records=len(stored_at) if capture else 0,
            latency_record=times.latency_record if capture else [],
            latency_gone=times.latency_gone,
            settle_seconds=settled - began,
            api_per_pod=measure.per_pod(window, pods=self.n),
            api_operator_wide=measure.operator_wide_calls(window),
            redis_per_pod={k: v / self.n for k, v in sorted(commands.items())},
            record_bytes=sum(sizes) / len(sizes) if sizes else 0.0,
            redis_used_memory=memory_after,
            redis_memory_delta=memory_after - memory_before,
            peak_rss_mib=figures.peak_rss_mib,
            rss_end_mib=figures.rss_mib,
            cpu_seconds=figures.cpu_seconds,
            create_seconds=created_in,
            cpu_window=cpu_window,
            machine_busy=busy_share,
            watch_lag_max=max(times.lags) if times.lags else None,
            notes=notes,
            repeat=self.repeat,
            evidence_last=times.last_record if capture else times.last_gone,
            revision=self.revision,
            planted_finalizer=self.finalizer if self.scenario == "A" else None,
        )

    async def _create_executions(self, api: kube.Api, *, namespace: str, sent: list[float]) -> dict[str, str]:
        """Scenario B's N Executions (:func:`create_executions`)."""
        return await create_executions(
            api, namespace=namespace, executions=self.executions, project="allowed", sent=sent
        )

    async def _until_settled(
        self, observer: kube.Observer, *, proxy: FaultProxy, operator: OperatorProcess, mark: int
    ) -> bool:
        """Until every Pod is gone, every record stored and every Execution Done, and the operator
        has sent nothing but watches and the Lease for :data:`QUIET_SECONDS`; or until nothing moved
        for :data:`STALL_SECONDS`. Whether every Pod went and every record was stored."""
        names = [pod_name(e) for e in self.executions]
        # B's baseline writes attempt-retained too (without captures): the run waits for it alike.
        wait_for_records = self.mode == "capture" or self.scenario == "B"
        progress: tuple[int, ...] = ()
        cursor = mark
        moved = quiet_since = time.monotonic()
        hard_stop = moved + 120 + self.n * 0.25
        complete = False
        while True:
            await asyncio.sleep(0.5)
            calls = proxy.calls()
            busy = sum(1 for c in calls[cursor:] if not measure.operator_wide(measure.normalise(c)))
            cursor = len(calls)
            stored = int(self.redis.hlen(self.record_key)) if wait_for_records else self.n
            now = (observer.gone(names), stored, len(observer.done))
            if busy:
                quiet_since = time.monotonic()
            if busy or now != progress:
                progress, moved = now, time.monotonic()
            complete = now[0] >= self.n and stored >= self.n
            if complete and now[2] >= self.n and time.monotonic() - quiet_since >= QUIET_SECONDS:
                return complete
            if not operator.running:
                raise RuntimeError(f"the operator died during {self.label}:\n{operator.tail()}")
            if time.monotonic() - moved > STALL_SECONDS or time.monotonic() > hard_stop:
                return complete

    def _times(self, observer: kube.Observer, *, sent: list[float], stored_at: dict[str, float]) -> _Times:
        """When each Execution's worker was refused (A: the operator's start, in ``sent``; B: its
        Pod seen Failed), its Pod gone and its record stored."""
        refused_at: dict[str, float] = {}
        lags: list[float] = []
        for index, execution in enumerate(self.executions):
            seen = observer.pods.get(pod_name(execution))
            if self.scenario == "A":
                refused_at[execution] = sent[index]
            elif seen is not None and seen.failed_at is not None:
                refused_at[execution] = seen.failed_at
                if seen.finished_at:
                    lags.append(seen.failed_at - _epoch(seen.finished_at))
        gone_at = {
            e: s.deleted_at for e in self.executions if (s := observer.pods.get(pod_name(e))) and s.deleted_at
        }
        return _Times(
            gone_at=gone_at,
            latency_gone=[
                gone_at[e] - refused_at[e] for e in self.executions if e in gone_at and e in refused_at
            ],
            latency_record=[
                stored_at[e] - refused_at[e] for e in self.executions if e in stored_at and e in refused_at
            ],
            lags=lags,
            last_gone=_last(refused_at=refused_at, evidence_at=gone_at),
            last_record=_last(refused_at=refused_at, evidence_at=stored_at),
        )


def _last(*, refused_at: dict[str, float], evidence_at: dict[str, float]) -> float | None:
    """From the run's first refusal to its last evidence (of the Executions refused); None for none."""
    ends = [at for execution, at in evidence_at.items() if execution in refused_at]
    return max(ends) - min(refused_at.values()) if ends else None


@dataclass(frozen=True)
class _Times:
    gone_at: dict[str, float]
    latency_gone: list[float]
    latency_record: list[float]
    lags: list[float]
    """B: how long after each container's ``finishedAt`` the bench saw its Pod Failed."""
    last_gone: float | None = None
    """From the first refusal to the last Pod gone."""
    last_record: float | None = None
    """From the first refusal to the last record stored."""


def running_cluster(workdir: Path, *, profiling: bool = False) -> tuple[ControlPlane, bool]:
    """The cluster a benchmark runs on, and whether it started it: the one ``make cluster-up`` left
    running when the environment names it, else one of its own under ``workdir`` (its
    kube-apiserver serving pprof with ``profiling``)."""
    try:
        named = named_cluster()
    except ClusterError as error:
        raise SystemExit(str(error)) from error
    if named is not None:
        return named, False
    return start(workdir=workdir / "control-plane", bin_dir=build(), profiling=profiling), True


async def remove_namespace(cluster: ControlPlane, namespace: str) -> None:
    """Leave a reused cluster as it was: with the operator gone, kopf's finalizers would keep the
    Executions, and so the namespace, forever; they are dropped, then the namespace is deleted."""
    executions = f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/executions"
    async with kube.Api(cluster) as api:
        listed = await api.request("GET", executions)
        names = [str(item["metadata"]["name"]) for item in listed.get("items") or []]

        async def release(index: int) -> None:
            await api.request(
                "PATCH",
                f"{executions}/{names[index]}",
                {"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
                ok=(200, 404),
            )

        await kube.bounded(len(names), CREATE_PARALLELISM, release)
        await api.request("DELETE", f"/api/v1/namespaces/{namespace}", ok=(200, 202, 404))


#: The sampler ``--profile`` runs: py-spy installed next to this interpreter (``pip install py-spy``).
PY_SPY: Final = Path(sys.executable).with_name("py-spy")


def _py_spy(pid: int, path: Path) -> subprocess.Popen[bytes]:
    """Sample the operator with py-spy (``pip install py-spy``) into collapsed stacks, until SIGINT."""
    return subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--rate",
            "50",
            "--format",
            "raw",
            "--output",
            str(path),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        executable=str(PY_SPY),
    )


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
