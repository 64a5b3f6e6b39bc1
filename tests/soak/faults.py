"""Injects the plan's faults at their times, overlapping, and keeps the ledger of what was done.

Faults of one group (:data:`tests.soak.plan.GROUPS`: the operator processes, the Redis servers,
the cluster's processes) wait for each other, so that e.g. two Redis servers are never killed at
once; a fault that waited starts late, and the ledger says when it really ran.

``redis-lost-writes`` makes Redis lose acknowledged writes for real
(:meth:`~tests.soak.redis_set.SentinelSet.lose_writes`): both replicas' links held for 1 to 3 s
while the operators run with ``REDIS_MIN_REPLICAS=0`` (the writes of that window are acknowledged
by the primary alone: it answers them), then ``kill -9`` of the primary; the Sentinels promote a
replica that lacks them. The ledger says how many fields of the evidence hashes the promoted
replica lacked (read on each server just before the kill: what the primary held, whether or not
the client was still there to read its answer), and how many of them the new primary held again
when the fault ended (put back by the operator that wrote them, or written again by a later
step). It waits for the switch to ``REDIS_MIN_REPLICAS=0``
(:attr:`~tests.soak.plan.Plan.unreplicated_at`, done here too: both replicas rolled with the new
setting) and for a leader (up to 30 s: what a hold loses is what the leader writes, and each
replica restores what it wrote). It holds the operators' group as well as Redis'; the API faults wait
while it holds the links and until the restore (:class:`Alone`), and the workload's ``records
forget`` waits too (:class:`~tests.soak.redis_set.Gate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

from tests.soak.checker.model import Loss
from tests.soak.checker.records import DEFAULT_PREFIX
from tests.soak.plan import ALSO_HOLDS, API_FAULTS, GROUPS, FaultPlan, Plan
from tests.soak.redis_set import GATE_TIMEOUT
from tests.soak.rig import Replica, Rig
from tests.support.proxy import WATCH_QUERY, Delay, Hang, Reset, Respond, Rule, WatchError
from tests.support.redis_server import RedisServer

#: The query of any request that is not a watch (a watch that never answers is a network
#: outage kopf never recovers from by itself; timeouts and slow answers hit the other requests).
NOT_WATCH: Final = re.compile(r"^(?!(?:.*&)?watch=(?:true|1)(?:&|$))", re.IGNORECASE)
#: How long a restarted process may take to serve again before the fault counts as failed.
RECOVERY: Final = 180.0
#: How long a kubelet or containerd restart waits for a refused Pod to exist.
WAIT_FOR_REFUSED: Final = 20.0
#: How long a redis-lost-writes fault waits for a leader before it holds the links.
LEADER_PATIENCE: Final = 30.0
#: After a redis-lost-writes fault's promotion, how long the API faults still wait: the leader
#: looks at the primary's replication id once a second and restores at once.
RESTORE_GRACE: Final = 5.0


class Alone:
    """Many faults share it, one takes it alone, ahead of those that come after it: the API faults
    share it, ``redis-lost-writes`` takes it from before it holds the links until the restore
    (:data:`RESTORE_GRACE` after the promotion). The fault tests the restore after lost writes
    alone: overlapping API faults on the leader could move its Lease in the same seconds, which
    other faults test."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: not self._alone and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            async with self._changed:
                self._shared -= 1
                self._changed.notify_all()

    async def take(self) -> None:
        async with self._changed:
            self._waiting += 1
            await self._changed.wait_for(lambda: not self._alone and not self._shared)
            self._waiting -= 1
            self._alone = True

    async def give_back(self) -> None:
        async with self._changed:
            if self._alone:
                self._alone = False
                self._changed.notify_all()


@dataclass
class Injected:
    kind: str
    planned_at: float
    started: float
    """Seconds after the soak's start (monotonic)."""
    ended: float = 0.0
    target: str = ""
    detail: str = ""
    ok: bool = True
    lost: int | None = None
    """redis-lost-writes: fields of the evidence hashes the promoted replica lacked."""
    back: int | None = None
    """redis-lost-writes: how many of them the new primary held when the fault ended."""
    lost_by_hash: dict[str, int] = field(default_factory=dict)
    killed: float | None = None
    """redis-lost-writes: when the primary was killed (seconds after the soak's start)."""


@dataclass
class Ledger:
    injected: list[Injected] = field(default_factory=list)
    changes: list[Injected] = field(default_factory=list)
    """What the soak changed that is not a fault: the operators rolled to REDIS_MIN_REPLICAS=0."""

    def counts(self) -> Counter[str]:
        return Counter(i.kind for i in self.injected if i.ok)

    def losses(self, *, origin: float) -> list[Loss]:
        """When Redis may have lost writes its primary acknowledged (:class:`Loss`), on the clock
        of ``origin`` (the soak's start): each redis-lost-writes kill, and each redis-primary-kill
        (from the kill until the old primary answers as a replica) that ended once the operators
        began to roll onto ``REDIS_MIN_REPLICAS=0``. With 1, a write needs a replica's copy, which
        the old primary, started again alone, cannot get; with 0 it answers writes until the
        Sentinels convert it, and they are gone with its data."""
        rolls = [c.started for c in self.changes if c.kind == "REDIS_MIN_REPLICAS=0"]
        unreplicated = min(rolls, default=None)
        losses = []
        for i in self.injected:
            if i.kind == "redis-lost-writes" and i.killed is not None:
                losses.append(Loss(kind=i.kind, began=origin + i.killed, ended=origin + i.killed))
            elif i.kind == "redis-primary-kill" and unreplicated is not None and i.ended >= unreplicated:
                losses.append(Loss(kind=i.kind, began=origin + i.started, ended=origin + i.ended))
        return losses

    @property
    def end(self) -> float:
        return max((i.ended for i in self.injected), default=0.0)


class Injector:
    def __init__(
        self, *, rig: Rig, plan: Plan, origin: float, refused_waiting: Callable[[], int] | None = None
    ) -> None:
        self.rig = rig
        self.plan = plan
        self.origin = origin
        #: How many refused worker Pods exist now (the checker's view): a kubelet or containerd
        #: restart waits for some, so it comes while refused Pods wait for their capture.
        self.refused_waiting = refused_waiting
        self.ledger = Ledger()
        self._locks = {group: asyncio.Lock() for group in set(GROUPS.values())}
        self._api_faults = Alone()
        #: Set once the operators run with REDIS_MIN_REPLICAS=0 (redis-lost-writes waits for it).
        self.unreplicated = asyncio.Event()

    def now(self) -> float:
        return time.monotonic() - self.origin

    async def run(self) -> Ledger:
        await asyncio.gather(self._switch(), *(self._one(fault) for fault in self.plan.faults))
        return self.ledger

    async def _one(self, fault: FaultPlan) -> None:
        await asyncio.sleep(max(fault.at - self.now(), 0))
        if fault.kind == "redis-lost-writes":
            await self.unreplicated.wait()
        groups = sorted({GROUPS[fault.kind], *ALSO_HOLDS.get(fault.kind, ())} if fault.kind in GROUPS else ())
        async with contextlib.AsyncExitStack() as held:
            for group in groups:  # Always in the same order: two faults never wait for each other.
                await held.enter_async_context(self._locks[group])
            if fault.kind in API_FAULTS:
                await held.enter_async_context(self._api_faults.shared())
            await self._perform(fault)

    async def _switch(self) -> None:
        """At the plan's ``unreplicated_at``: both operator replicas rolled, one after the other,
        with ``REDIS_MIN_REPLICAS=0`` (as ``helm upgrade --set redis.minReplicas=0`` rolls them)."""
        at = self.plan.unreplicated_at
        if at is None:
            return
        await asyncio.sleep(max(at - self.now(), 0))
        async with self._locks["operators"]:
            record = Injected(kind="REDIS_MIN_REPLICAS=0", planned_at=at, started=self.now())
            self.ledger.changes.append(record)
            try:
                self.rig.set_min_replicas(0)
                for replica in self.rig.replicas.values():
                    await asyncio.to_thread(replica.restart, graceful=True)
                record.detail = "both operator replicas rolled (SIGTERM and start, one after the other)"
            except Exception as error:  # Reported, not fatal: the faults after it say the setting.
                record.ok = False
                record.detail = f"{type(error).__name__}: {error}"
            finally:
                self.unreplicated.set()
            record.ended = self.now()
        print(
            f"soak: {record.started:7.1f}s operators on REDIS_MIN_REPLICAS=0 "
            f"({record.ended - record.started:.1f}s) {'' if record.ok else 'FAILED '}{record.detail}",
            flush=True,
        )

    async def _perform(self, fault: FaultPlan) -> None:
        record = Injected(kind=fault.kind, planned_at=fault.at, started=self.now(), target=fault.target or "")
        self.ledger.injected.append(record)
        try:
            record.detail = await self._inject(fault, record)
        except Exception as error:  # A fault that could not be injected is reported, not fatal.
            record.ok = False
            record.detail = f"{type(error).__name__}: {error}"
        record.ended = self.now()
        print(
            f"soak: {record.started:7.1f}s fault {fault.kind} {record.target} "
            f"({record.ended - record.started:.1f}s) {'' if record.ok else 'FAILED '}"
            f"{record.detail}".rstrip(),
            flush=True,
        )

    async def _target(self, fault: FaultPlan, record: Injected) -> Replica:
        """The replica a targeted fault hits: the leader (or, for ``standby``, the other one)."""
        leader = await asyncio.to_thread(self.rig.leader)
        replicas = list(self.rig.replicas.values())
        if leader is None:
            chosen = replicas[0]
        elif fault.target == "leader":
            chosen = leader
        else:
            chosen = next(r for r in replicas if r is not leader)
        record.target = (
            f"{fault.target}={chosen.name}" if leader is not None else f"{chosen.name} (no leader)"
        )
        return chosen

    async def _inject(self, fault: FaultPlan, record: Injected) -> str:
        kind = fault.kind
        if kind.startswith("api-"):
            return await self._api(fault, await self._target(fault, record))
        if kind == "redis-partition":
            replica = await self._target(fault, record)
            self.rig.network.partition(replica.name)
            try:
                await asyncio.sleep(fault.seconds)
            finally:
                self.rig.network.heal(replica.name)
            return f"operator {replica.name} cut off Redis for {fault.seconds:.1f}s"
        if kind in ("leader-kill", "standby-kill"):
            return await self._kill_operator(fault)
        if kind == "rolling-restart":
            for replica in self.rig.replicas.values():
                await asyncio.to_thread(replica.restart, graceful=True)
            return "SIGTERM and start, one replica after the other"
        if kind == "redis-lost-writes":
            return await self._lost_writes(fault, record)
        if kind.startswith("redis-"):
            return await self._redis(fault)
        name = {
            "apiserver-restart": "kube-apiserver",
            "kwok-restart": "kwok",
            "kubelet-restart": "kubelet",
            "containerd-restart": "containerd",
        }[kind]
        return await self._restart_child(name)

    async def _api(self, fault: FaultPlan, replica: Replica) -> str:
        proxy = replica.proxy
        rules: list[Rule] = []
        if fault.kind == "api-5xx":
            rules.append(proxy.add_rule(path=".*", action=Respond(status=fault.status)))
        elif fault.kind == "api-429":
            rules.append(proxy.add_rule(path=".*", action=Respond(status=429, retry_after=1)))
        elif fault.kind == "api-timeout":
            rules.append(proxy.add_rule(path=".*", query=NOT_WATCH, action=Hang()))
        elif fault.kind == "api-reset":
            rules.append(proxy.add_rule(path=".*", action=Reset()))
        elif fault.kind == "api-slow":
            # Answered late, after the server acted: a client that gave up does not know it did.
            rules.append(
                proxy.add_rule(
                    path=".*", query=NOT_WATCH, action=Delay(seconds=fault.delay, after_forward=True)
                )
            )
        elif fault.kind == "api-watch-error":
            rules.append(proxy.add_rule(path=".*", query=WATCH_QUERY, action=WatchError()))
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            for rule in rules:
                proxy.remove_rule(rule)
        hits = sum(rule.hits for rule in rules)
        late = f", answers {fault.delay:.1f}s late" if fault.kind == "api-slow" else ""
        return f"operator {replica.name}'s API for {fault.seconds:.1f}s{late} ({hits} requests hit)"

    async def _kill_operator(self, fault: FaultPlan) -> str:
        leader = await asyncio.to_thread(self.rig.leader)
        replicas = list(self.rig.replicas.values())
        if fault.kind == "leader-kill":
            victim: Replica = leader or replicas[0]
            what = "the leader" if leader else "replica a (no leader held the Lease)"
        else:
            victim = next((r for r in replicas if r is not leader), replicas[1])
            what = "the standby"
        await asyncio.to_thread(victim.kill)
        await asyncio.sleep(fault.seconds)
        await asyncio.to_thread(victim.ensure_running)
        return f"SIGKILL {what} ({victim.name}), started again after {fault.seconds:.1f}s"

    async def _redis(self, fault: FaultPlan) -> str:
        redis_set = self.rig.sentinel_set
        settled = await asyncio.to_thread(redis_set.settled, replicas=1)
        primary = await asyncio.to_thread(redis_set.primary)
        if primary is None:
            raise RuntimeError(f"no primary: {redis_set.describe()}")
        if fault.kind == "redis-replica-kill":
            victim = redis_set.replicas()[0]
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(fault.seconds)
            await asyncio.to_thread(victim.start)
            what = f"kill -9 replica {victim.port}, started again after {fault.seconds:.1f}s"
        elif fault.kind == "redis-primary-restart":
            await asyncio.to_thread(primary.kill)
            await asyncio.to_thread(primary.start)
            what = f"kill -9 primary {primary.port}, started again at once from its AOF"
        else:
            what = await self._failover(fault, primary)
        await asyncio.to_thread(redis_set.wait_settled, timeout=RECOVERY, replicas=1)
        after = await asyncio.to_thread(redis_set.primary_port)
        return f"{what}; primary now {after}" + ("" if settled else " (the set was not settled before)")

    async def _failover(self, fault: FaultPlan, primary: RedisServer) -> str:
        """``kill -9`` the primary, start it again ``fault.seconds`` later, and wait until the
        Sentinels have made it a replica: until then it may answer writes as a primary of its own,
        lost when it is converted, so the fault (and the Loss the checker derives from it) lasts
        that long. While the operators run with ``REDIS_MIN_REPLICAS=0`` the workload's forgets
        wait the fault out (:class:`~tests.soak.redis_set.Gate`): a forget there is a person's
        write that Redis may lose by its own doing, which is not what the soak judges."""
        redis_set = self.rig.sentinel_set
        gated = self.unreplicated.is_set()
        if gated:
            await asyncio.to_thread(redis_set.gate.close, timeout=GATE_TIMEOUT)
        try:
            if gated:
                await asyncio.to_thread(redis_set.wait_replicated, primary)
            await asyncio.to_thread(primary.kill)
            await asyncio.sleep(fault.seconds)
            await asyncio.to_thread(primary.start)
            what = f"kill -9 primary {primary.port} (failover), started again after {fault.seconds:.1f}s"
            began = time.monotonic()
            await asyncio.to_thread(redis_set.wait_replica, primary, timeout=RECOVERY)
            return what + f", a replica again {time.monotonic() - began:.1f}s after"
        finally:
            if gated:
                redis_set.gate.open()

    async def _lost_writes(self, fault: FaultPlan, record: Injected) -> str:
        redis_set = self.rig.sentinel_set
        began = time.monotonic()
        # Both replicas in sync first: each is moved onto its relay with a partial resync.
        await asyncio.to_thread(redis_set.wait_settled, timeout=RECOVERY, replicas=2)
        synced = time.monotonic()
        await self._a_leader()
        led = time.monotonic()
        await self._api_faults.take()  # The API faults under way end (at most 5 s); no other starts.
        try:
            before = await asyncio.to_thread(self.rig.leader)
            ready = time.monotonic()
            loss = await asyncio.to_thread(
                redis_set.lose_writes, hold=fault.hold, pattern=f"{DEFAULT_PREFIX}:*"
            )
            killed = time.monotonic()
            record.killed = loss.killed_at - self.origin
            loss.promoted = await asyncio.to_thread(
                redis_set.wait_promoted, old=loss.primary, timeout=RECOVERY
            )
            await asyncio.sleep(RESTORE_GRACE)
            after = await asyncio.to_thread(self.rig.leader)
        finally:
            await self._api_faults.give_back()
        record.lost, record.lost_by_hash = loss.count(), loss.by_hash()
        await asyncio.sleep(max(fault.seconds - (time.monotonic() - killed), 0))
        await asyncio.to_thread(loss.primary.start)
        await asyncio.to_thread(redis_set.wait_settled, timeout=RECOVERY, replicas=1)
        record.back = await asyncio.to_thread(redis_set.present, loss.lost())
        if before is not None and before is after:
            lease = f"Lease held by {after.name} throughout"
        else:
            named = [r.name if r else "none" for r in (before, after)]
            lease = f"Lease holder {named[0]} before, {named[1]} after (the writer may be gone)"
        by_hash = ", ".join(f"{k} {v}" for k, v in record.lost_by_hash.items()) or "none"
        behind = loss.behind.get(loss.promoted, 0)
        waited = f"waited {synced - began:.1f}s for 2 replicas in sync, {led - synced:.1f}s for a leader, "
        waited += f"{ready - led:.1f}s for the API faults under way"
        return (
            f"{waited}, {loss.prepared:.1f}s to move the replicas onto relays; replicas' links held "
            f"{loss.held:.1f}s (REDIS_MIN_REPLICAS={self.rig.min_replicas}), "
            f"kill -9 primary {loss.primary.port}; promoted {loss.promoted} lacked {record.lost} of "
            f"{loss.primary_fields} evidence fields ({by_hash}; {behind} bytes of replication stream); "
            f"{record.back} of them on the new primary when the fault ended; old primary started "
            f"again after {fault.seconds:.1f}s; {lease}"
        )

    async def _a_leader(self) -> Replica | None:
        """The replica holding the Lease, once one does (after a rollout the new processes wait
        for the old holder's Lease to expire), or None after :data:`LEADER_PATIENCE`: the writes a
        hold loses are a leader's, and the restore is its."""
        for _ in range(int(LEADER_PATIENCE)):
            leader = await asyncio.to_thread(self.rig.leader)
            if leader is not None:
                return leader
            await asyncio.sleep(1.0)
        return None

    async def _restart_child(self, name: str) -> str:
        waiting = ""
        if name in ("kubelet", "containerd") and self.refused_waiting is not None:
            for _ in range(int(WAIT_FOR_REFUSED / 0.2)):
                if self.refused_waiting():
                    break
                await asyncio.sleep(0.2)
            waiting = f" with {self.refused_waiting()} refused Pods waiting for their capture"
        began = time.monotonic()
        await asyncio.to_thread(self.rig.cluster.restart, name)
        deadline = began + RECOVERY
        while not await asyncio.to_thread(self.rig.cluster.serves, name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not serve again within {RECOVERY:.0f}s")
            await asyncio.sleep(0.5)
        took = time.monotonic() - began
        return f"{name} killed and started again (same flags and data){waiting}; serving after {took:.1f}s"
