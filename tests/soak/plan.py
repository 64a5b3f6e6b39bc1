"""The soak's plan: which Executions, when, what happens to them, and which faults, when. A pure
function of the seed and the size, so ``--seed`` replays the same workload and fault schedule
(the operator's own timing, of course, differs from run to run).

Workers are played by kwok from each Swarm's template (``tests/support/pods.py``'s annotations);
the Swarms below give the mix: workers that fail after the hand with various exit codes, one
OOMKilled, workers that succeed, workers that never start (a waiting state and a short startup
deadline). Executions for a project outside the registration are refused at launch: either the
operator creates their Pod (refused-created: it is usually still Pending when launch removal reads
it, so it is deleted without a capture), or (refused-adopted) the soak creates the Execution and at
once its worker Pod, owned by the new Execution's UID with the evidence finalizer and already
failed, as a launch that crashed before recording its hand leaves it, and the operator adopts it
(launch removal captures it). The operator runs meanwhile, so its own create sometimes comes
first (the soak's gets 409, :attr:`tests.soak.workload.Tally.adopted_lost_race`): the refused-
adopted Swarms' template fails its workers as the planted Pod fails (same exit code, at once), so
the operator's own Pod is then refused the same way and judged like any other. Some Executions
are cancelled or deleted at a random moment, some names are used again after the first Execution
of that name was Done and deleted (the new one is ``Invalid``, ``NameInUse``), some names are
forgotten and applied again as the ``NameInUse`` condition tells a user to (the Execution deleted,
``records forget``, the same name applied: a new life of the name, launched), and two Swarms'
templates change mid-run.

**Two durability settings in one run.** The operators start with ``REDIS_MIN_REPLICAS=1`` (what
docs/redis.md asks for a Redis with replicas: a write a delete depends on waits for a replica), and
at :attr:`Plan.unreplicated_at` (45 % of the period) both are rolled, one after the other, with
``REDIS_MIN_REPLICAS=0`` (the chart's default), as ``helm upgrade --set redis.minReplicas=0``
would. Why not one setting for the whole run: with 1 the primary acknowledges no evidence write
alone, so no failover can lose an acknowledged record and the failover restore is never needed
(the full runs before issue 27 saw it find nothing missing); with 0 for the whole run the soak
would no longer exercise ``WAIT`` (Pods kept while no replica acknowledged) under its faults.
The first part keeps every fault the soak had, at 1; the second adds ``redis-lost-writes``, the
fault that makes Redis lose acknowledged writes for real (the replicas' links held, the primary
killed: see :mod:`tests.soak.faults`), which is only planned there. The other Redis faults stay
meaningful at 0 too: a failover there may lose what the links had not carried yet, and the
restore must put it back.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Final, Literal

from tests.support import pods

Kind = Literal["refused-adopted", "refused-created", "fails", "oom", "succeeds", "never-starts"]
Action = Literal["cancel", "delete"]
Node = Literal["kwok", "real"]

FaultKind = Literal[
    "api-5xx",
    "api-429",
    "api-timeout",
    "api-reset",
    "api-slow",
    "api-watch-error",
    "leader-kill",
    "standby-kill",
    "rolling-restart",
    "redis-primary-kill",
    "redis-replica-kill",
    "redis-primary-restart",
    "redis-lost-writes",
    "redis-partition",
    "apiserver-restart",
    "kwok-restart",
    "kubelet-restart",
    "containerd-restart",
]
API_FAULTS: Final[tuple[FaultKind, ...]] = (
    "api-5xx",
    "api-429",
    "api-timeout",
    "api-reset",
    "api-slow",
    "api-watch-error",
)
#: Faults on one operator replica (its API proxy, or its link to Redis).
TARGETED: Final[frozenset[FaultKind]] = frozenset({*API_FAULTS, "redis-partition"})
#: Faults that run one at a time within their group (two at once would be another fault: both
#: replicas down, two Redis servers down, the API server and kwok down together).
GROUPS: Final[Mapping[FaultKind, str]] = {
    "leader-kill": "operators",
    "standby-kill": "operators",
    "rolling-restart": "operators",
    "redis-primary-kill": "redis",
    "redis-replica-kill": "redis",
    "redis-primary-restart": "redis",
    "redis-lost-writes": "redis",
    "apiserver-restart": "cluster",
    "kwok-restart": "cluster",
    "kubelet-restart": "cluster",
    "containerd-restart": "cluster",
}
#: Groups a kind holds besides its own: while ``redis-lost-writes`` runs (from the held links to the
#: restore after the failover) no operator is killed or rolled. The restore is the writer's: a
#: leader that dies in the same failover takes what it wrote with it (docs/redis.md says so); that
#: is not what this fault is for.
ALSO_HOLDS: Final[Mapping[FaultKind, tuple[str, ...]]] = {"redis-lost-writes": ("operators",)}
#: Relative frequency of each kind beyond the first of each.
_WEIGHTS: Final[Mapping[FaultKind, float]] = {
    "api-5xx": 6,
    "api-429": 5,
    "api-timeout": 4,
    "api-reset": 4,
    "api-slow": 4,
    "api-watch-error": 3,
    "leader-kill": 1.5,
    "standby-kill": 1,
    "rolling-restart": 0.4,
    "redis-primary-kill": 1,
    "redis-replica-kill": 1,
    "redis-primary-restart": 0.8,
    "redis-lost-writes": 0.8,
    "redis-partition": 3,
    "apiserver-restart": 0.5,
    "kwok-restart": 0.6,
    "kubelet-restart": 0.6,
    "containerd-restart": 0.5,
}
REPLICAS: Final = ("a", "b")
#: Whom a targeted fault hits, resolved when it starts: the replica holding the Lease, or the other.
TARGETS: Final = ("leader", "standby")
#: The project every Swarm registers; other projects are refused at launch (project_unpermitted).
PROJECT: Final = "soak"
OUTSIDE: Final = "outside-the-registration"


#: On the real node the worker prints its marker itself: the first 16 hex digits of its Pod's UID
#: (the downward API gives it POD_UID), so the checker knows it from the UID alone.
MARKER_SH: Final = (
    'm=$(echo "$POD_UID" | tr -d - | cut -c1-16); '
    'echo "worker startup refused: soak-marker-$m pod $POD_NAME"; '
)
MISSING_IMAGE: Final = "registry.invalid/agentihooks-swarm/missing:never-pushed"


def real_marker(uid: str) -> str:
    """The marker a real-node worker prints (see :data:`MARKER_SH`)."""
    return uid.replace("-", "")[:16]


@dataclass(frozen=True)
class RealWorker:
    """How a Swarm's workers behave on the real node: real containers, no annotations."""

    script: str = ""
    """What ``/bin/sh -c`` runs (after :data:`MARKER_SH`) in the busybox image."""
    memory: str | None = None
    image: str | None = None
    """An image other than busybox (one that cannot be pulled)."""
    missing_secret: bool = False
    """An env variable from a Secret that does not exist (CreateContainerConfigError)."""


@dataclass(frozen=True)
class SwarmPlan:
    slug: str
    kind: Kind
    annotations: Mapping[str, str]
    """kwok's protocol annotations on the worker template (how kwok plays its Pods)."""
    startup_deadline_seconds: int | None = None
    real: RealWorker = field(default_factory=RealWorker)
    """The same behaviour on the real node."""
    exit_code: int | None = None
    """refused-adopted: the exit code of its workers and of the Pods the soak plants for it."""


def _exits(code: int, *, run_for: str, sleep: int, reason: str | None = None) -> SwarmPlan:
    """A Swarm whose workers run for ``run_for`` (``sleep`` seconds on the real node), then exit
    with ``code``."""
    return SwarmPlan(
        f"exit{code}",
        "fails",
        pods.protocol_annotations(phase="Failed", exit_code=code, reason=reason, run_for=run_for),
        real=RealWorker(script=f"sleep {sleep}; exit {code}"),
    )


def _refused(code: int) -> SwarmPlan:
    """A Swarm for refused-adopted Executions: its workers fail at once with ``code``, as the Pod
    the soak plants for them does (:func:`tests.soak.workload.Workload._plant_failed_pod`)."""
    return SwarmPlan(
        f"refused{code}",
        "refused-adopted",
        pods.protocol_annotations(phase="Failed", exit_code=code),
        real=RealWorker(script=f"exit {code}"),
        exit_code=code,
    )


#: Exit codes of the Pods the soak plants for refused-adopted Executions (one Swarm each).
_ADOPTED_EXIT_CODES: Final = (1, 78, 126, 127)

SWARMS: Final[tuple[SwarmPlan, ...]] = (
    _exits(1, run_for="1s", sleep=1),
    _exits(2, run_for="3s", sleep=3),
    _exits(78, run_for="2s", sleep=2, reason="Error"),
    _exits(143, run_for="1500ms", sleep=1),
    SwarmPlan(
        "oom",
        "oom",
        pods.protocol_annotations(phase="Failed", exit_code=137, reason="OOMKilled", run_for="1s"),
        # dd's one 64 MiB block does not fit in 16 MiB: the kernel kills it (137, OOMKilled).
        real=RealWorker(script="exec dd if=/dev/zero of=/dev/null bs=64M count=4", memory="16Mi"),
    ),
    SwarmPlan(
        "ok",
        "succeeds",
        pods.protocol_annotations(phase="Succeeded", run_for="1s"),
        real=RealWorker(script="sleep 1; exit 0"),
    ),
    SwarmPlan(
        "stuck",
        "never-starts",
        pods.protocol_annotations(
            waiting_reason="ImagePullBackOff", waiting_message="Back-off pulling image (soak)"
        ),
        startup_deadline_seconds=3,
        real=RealWorker(image=MISSING_IMAGE),
    ),
    SwarmPlan(
        "nosecret",
        "never-starts",
        pods.protocol_annotations(
            waiting_reason="CreateContainerConfigError",
            waiting_message='secret "swarm-worker-soak-missing" not found',
        ),
        startup_deadline_seconds=4,
        real=RealWorker(script="exit 0", missing_secret=True),
    ),
    *(_refused(code) for code in _ADOPTED_EXIT_CODES),
)
#: Template changes mid-run: (Swarm, its new annotations, its new real-node behaviour, when as a
#: share of the run).
_CHANGES: Final = (
    (
        "exit78",
        pods.protocol_annotations(phase="Failed", exit_code=3, reason="Error", run_for="500ms"),
        RealWorker(script="exit 3"),
        0.4,
    ),
    (
        "ok",
        pods.protocol_annotations(phase="Failed", exit_code=4, run_for="2s"),
        RealWorker(script="sleep 2; exit 4"),
        0.65,
    ),
)
_KIND_WEIGHTS: Final[Mapping[Kind, float]] = {
    "refused-adopted": 0.12,
    "refused-created": 0.08,
    "fails": 0.38,
    "oom": 0.08,
    "succeeds": 0.22,
    "never-starts": 0.12,
}


@dataclass(frozen=True)
class ExecutionPlan:
    name: str
    swarm: str
    kind: Kind
    at: float
    """Seconds after the workload starts."""
    action: Action | None = None
    action_after: float = 0.0
    """Seconds after its creation."""
    incarnation: int = 0
    """0: the name's first Execution; 1: the name used again after the first was Done and deleted."""
    forget: bool = False
    """incarnation 1: the first one's records are forgotten (``records forget``) before the name
    is applied again, so the new Execution is launched (else it is ``Invalid``, ``NameInUse``)."""
    in_hold: int | None = None
    """forget: applied again while the ``redis-lost-writes`` fault of this index (in the plan's
    order of those faults) holds the replicas' links."""
    exit_code: int | None = None
    """refused-adopted: the planted Pod's exit code (its Swarm's)."""

    @property
    def project(self) -> str:
        return OUTSIDE if self.kind.startswith("refused") else PROJECT


@dataclass(frozen=True)
class TemplateChange:
    at: float
    swarm: str
    annotations: Mapping[str, str]
    real: RealWorker


@dataclass(frozen=True)
class FaultPlan:
    at: float
    kind: FaultKind
    seconds: float
    """How long the window lasts, or how long the process stays down."""
    target: str | None = None
    """``leader`` or ``standby`` for the faults in :data:`TARGETED`."""
    status: int = 0
    """api-5xx: which status."""
    delay: float = 0.0
    """api-slow: how late each answer comes (past the operator's 10 s API timeout, or not)."""
    hold: float = 0.0
    """redis-lost-writes: how long the replicas' links are held before the primary is killed (the
    writes of that window are acknowledged by the primary alone)."""


@dataclass(frozen=True)
class Plan:
    seed: int
    node: Node
    period: float
    """Seconds over which Executions are created and faults start."""
    executions: tuple[ExecutionPlan, ...]
    changes: tuple[TemplateChange, ...]
    faults: tuple[FaultPlan, ...]
    swarms: tuple[SwarmPlan, ...] = field(default=SWARMS)
    unreplicated_at: float | None = None
    """Seconds after the start when the operators are rolled to ``REDIS_MIN_REPLICAS=0`` (None:
    1 for the whole run)."""

    def digest(self) -> str:
        """A short hash of the whole plan: two runs with the same seed and size print the same one."""
        text = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def kinds(self) -> dict[str, int]:
        """Executions by kind, and how many get a cancel or a delete at a random moment."""
        counted: Counter[str] = Counter()
        for execution in self.executions:
            again = " (name forgotten and applied again)" if execution.forget else " (name used again)"
            counted[execution.kind + (again if execution.incarnation else "")] += 1
            if execution.action is not None:
                counted[f"{execution.action} at a random moment"] += 1
        return dict(sorted(counted.items()))


def fault_kinds(node: Node) -> tuple[FaultKind, ...]:
    """The kinds a node has: kwok is restarted on kwok, the kubelet and containerd on the real node."""
    other: set[str] = {"kubelet-restart", "containerd-restart"} if node == "kwok" else {"kwok-restart"}
    return tuple(k for k in _WEIGHTS if k not in other)


#: Share of the period after which the operators run with ``REDIS_MIN_REPLICAS=0``.
UNREPLICATED_SHARE: Final = 0.45
#: The earliest a ``redis-lost-writes`` fault comes after the switch to 0 (both replicas rolled).
AFTER_SWITCH: Final = 8.0
#: Names forgotten and applied again while the links of each ``redis-lost-writes`` fault are held.
IN_HOLD: Final = 2


def make(
    *,
    seed: int,
    executions: int,
    period: float,
    faults: int,
    node: Node = "kwok",
    reuse_share: float = 0.04,
    forget_share: float = 0.03,
    cancel_share: float = 0.10,
    delete_share: float = 0.12,
    heavy_once: bool = False,
    unreplicated_share: float | None = UNREPLICATED_SHARE,
) -> Plan:
    """The plan for ``seed``: ``executions`` Executions over ``period`` seconds, ``faults`` faults
    (at least one of each kind), names used again for ``reuse_share`` of them, names forgotten and
    applied again for ``forget_share``.

    ``heavy_once``: the faults that stop a process (operators, Redis servers, the cluster's) come
    once each and the others fill the count. A killed leader stops every launch for up to a
    lease (the standby takes over once the dead leader's Lease has expired), so a short run with
    several of them measures little but that wait.

    ``unreplicated_share``: when the operators go to ``REDIS_MIN_REPLICAS=0``, as a share of the
    period (None: never, and no ``redis-lost-writes``; see the module docstring).
    """
    rng = random.Random(seed)
    reused = int(executions * reuse_share)
    forgotten = int(executions * forget_share)
    planned = _first_lives(
        rng,
        count=executions - reused - forgotten,
        period=period,
        cancel_share=cancel_share,
        delete_share=delete_share,
    )
    # Names from the first half of the run, used again in its last sixth: the first Execution of
    # the name has had time to end (the soak then deletes it, and waits for it and its Pod to go).
    candidates = [e for e in planned if e.action != "delete" and e.at < period * 0.5]
    chosen = rng.sample(candidates, min(reused + forgotten, len(candidates)))
    planned += _used_again(rng, chosen[:reused], period=period)
    unreplicated_at = round(period * unreplicated_share, 3) if unreplicated_share is not None else None
    fault_plans = _faults(
        rng,
        period=period,
        count=faults,
        node=node,
        heavy_once=heavy_once,
        unreplicated_at=unreplicated_at,
    )
    planned += _forgotten(rng, chosen[reused:], faults=fault_plans, period=period)
    planned.sort(key=lambda e: e.at)
    changes = tuple(
        TemplateChange(at=round(period * share, 3), swarm=slug, annotations=annotations, real=real)
        for slug, annotations, real, share in _CHANGES
    )
    return Plan(
        seed=seed,
        node=node,
        period=period,
        executions=tuple(planned),
        changes=changes,
        faults=fault_plans,
        unreplicated_at=unreplicated_at,
    )


def _first_lives(
    rng: random.Random, *, count: int, period: float, cancel_share: float, delete_share: float
) -> list[ExecutionPlan]:
    """The names' first Executions, spread over the first five sixths of the period, each of a
    kind drawn by :data:`_KIND_WEIGHTS`, some cancelled or deleted at a random moment."""
    kinds = list(_KIND_WEIGHTS)
    weights = [_KIND_WEIGHTS[k] for k in kinds]
    by_kind: dict[Kind, list[SwarmPlan]] = {}
    for swarm in SWARMS:
        by_kind.setdefault(swarm.kind, []).append(swarm)
    # refused-created takes any Swarm that launches workers; refused-adopted's fail at once.
    launching = [s for s in SWARMS if s.kind != "refused-adopted"]
    swarms = {s.slug: s for s in SWARMS}
    planned: list[ExecutionPlan] = []
    spacing = period * 0.85 / max(count, 1)  # The last sixth of the period is for the names used again.
    for index in range(count):
        kind: Kind = rng.choices(kinds, weights)[0]
        slug = rng.choice(by_kind.get(kind) or launching).slug
        roll = rng.random()
        action: Action | None = None
        if roll < cancel_share:
            action = "cancel"
        elif roll < cancel_share + delete_share:
            action = "delete"
        # A fifth of the actions come during the launch itself, the others any time in 6 s.
        after = rng.uniform(0, 0.5) if rng.random() < 0.2 else rng.uniform(0.5, 6.0)
        planned.append(
            ExecutionPlan(
                name=f"x{index:05d}",
                swarm=slug,
                kind=kind,
                at=round(index * spacing + rng.uniform(0, spacing), 3),
                action=action,
                action_after=round(after, 3) if action else 0.0,
                exit_code=swarms[slug].exit_code,
            )
        )
    return planned


def _used_again(
    rng: random.Random, earlier: Sequence[ExecutionPlan], *, period: float
) -> list[ExecutionPlan]:
    """Each of ``earlier``'s names applied again in the period's last sixth, at least 15 s after
    its first Execution, once that one is Done and deleted."""
    return [
        ExecutionPlan(
            name=first.name,
            swarm=first.swarm,
            kind=first.kind,
            at=round(max(first.at + 15.0, period * 0.85 + rng.uniform(0, period * 0.15)), 3),
            incarnation=1,
            exit_code=first.exit_code,
        )
        for first in earlier
    ]


def _forgotten(
    rng: random.Random, earlier: Sequence[ExecutionPlan], *, faults: Sequence[FaultPlan], period: float
) -> list[ExecutionPlan]:
    """Names forgotten and applied again: :data:`IN_HOLD` for each ``redis-lost-writes`` fault,
    applied again while its links are held (their new owner claim and first records are then
    acknowledged by the primary alone, and lost with it), the others at random from a third of
    the period on, at least 15 s after the name's first Execution."""
    pending = sorted(earlier, key=lambda e: e.at, reverse=True)  # The earliest are applied in a hold.
    again: list[ExecutionPlan] = []
    lost_writes = [f for f in faults if f.kind == "redis-lost-writes"]
    for index, fault in enumerate(lost_writes):
        for _ in range(IN_HOLD):
            if not pending:
                break
            name = pending.pop()
            # Its forget comes 20 s before (workload.FORGET_LEAD_IN_HOLD), once its first is gone.
            at = max(name.at + 35.0, fault.at + 1.0 + rng.uniform(0, fault.hold))
            again.append(_again(name, at=at, in_hold=index))
    for name in pending:
        at = max(name.at + 15.0, rng.uniform(period * 0.3, period * 0.95))
        again.append(_again(name, at=at, in_hold=None))
    return again


def _again(earlier: ExecutionPlan, *, at: float, in_hold: int | None) -> ExecutionPlan:
    return ExecutionPlan(
        name=earlier.name,
        swarm=earlier.swarm,
        kind=earlier.kind,
        at=round(at, 3),
        incarnation=1,
        forget=True,
        in_hold=in_hold,
        exit_code=earlier.exit_code,
    )


def _faults(
    rng: random.Random,
    *,
    period: float,
    count: int,
    node: Node,
    heavy_once: bool,
    unreplicated_at: float | None,
) -> tuple[FaultPlan, ...]:
    kinds = [k for k in fault_kinds(node) if unreplicated_at is not None or k != "redis-lost-writes"]
    chosen: list[FaultKind] = list(kinds)
    more = [k for k in kinds if not heavy_once or k not in GROUPS]
    chosen += rng.choices(more, [_WEIGHTS[k] for k in more], k=max(count - len(kinds), 0))
    faults = []
    for kind in chosen:
        earliest = 3.0
        if kind == "redis-lost-writes" and unreplicated_at is not None:
            earliest = min(unreplicated_at + AFTER_SWITCH, max(period - 5.0, 4.0))
        faults.append(
            FaultPlan(
                at=round(rng.uniform(earliest, max(period - 5.0, earliest + 1.0)), 3),
                kind=kind,
                seconds=round(_duration(rng, kind), 3),
                target=rng.choices(TARGETS, (3, 1))[0] if kind in TARGETED else None,
                status=rng.choice((500, 503, 504)) if kind == "api-5xx" else 0,
                delay=round(rng.uniform(2.0, 12.0), 3) if kind == "api-slow" else 0.0,
                hold=round(rng.uniform(1.0, 3.0), 3) if kind == "redis-lost-writes" else 0.0,
            )
        )
    return tuple(sorted(faults, key=lambda f: f.at))


def _duration(rng: random.Random, kind: FaultKind) -> float:
    if kind in API_FAULTS:
        return rng.uniform(1.0, 5.0)
    if kind == "redis-partition":
        return rng.uniform(2.0, 8.0)
    if kind in ("redis-primary-kill", "redis-lost-writes"):
        return rng.uniform(3.0, 8.0)  # Until the old primary is started again (as a replica).
    if kind == "redis-replica-kill":
        return rng.uniform(2.0, 6.0)
    if kind in ("leader-kill", "standby-kill"):
        return rng.uniform(0.5, 3.0)  # A supervisor's restart delay.
    if kind in ("apiserver-restart", "kwok-restart", "kubelet-restart", "containerd-restart"):
        return rng.uniform(0.5, 3.0)
    return 0.0


def summary(plan: Plan, *, limit: int = 5) -> Sequence[str]:
    """The first few planned faults, for the log."""
    return [f"{f.at:7.1f}s {f.kind} {f.seconds:.1f}s {f.target or ''}".rstrip() for f in plan.faults[:limit]]
