"""The checker's own observations while the soak runs: its watch of the worker Pods and of the
Executions (plain aiohttp, :class:`tests.bench.kube.Api`), the Redis probe it makes as soon as it
sees a refused Pod deleted, and the operator processes' memory and ``/metrics``.

A watch that breaks (the API server killed, a 410) is followed by a list: a Pod known alive and
missing from the list was deleted while the watch was down, and its final status was not seen
(:attr:`~.model.PodHistory.vanished`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import aiohttp
import redis

from tests.bench import kube
from tests.soak.checker.model import (
    Capture,
    ExecutionHistory,
    OperatorLife,
    PodHistory,
    Probe,
    RecordError,
    Restore,
    captures_from,
    owner_uid,
    pod_attempt,
    pod_controller,
    pod_finalizers,
    pod_identity,
)
from tests.soak.checker.records import HASHES, OWNERS, key

EXECUTIONS: Final = "/apis/swarm.agentihooks.io/v1alpha1"
#: How long a probe keeps trying a Redis that does not answer (a failover takes seconds).
PROBE_PATIENCE: Final = 20.0

Handle = Callable[[float, str, dict[str, Any]], None]


class _Follower:
    """List, then watch from the list's resourceVersion; list again whenever the watch breaks."""

    def __init__(self, *, api: kube.Api, path: str, handle: Handle, relisted: Callable[[set[str]], None]):
        self.api = api
        self.path = path
        self.handle = handle
        self.relisted = relisted
        self.breaks: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"checker watch {self.path}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def resync(self) -> None:
        """One list now, as after a break: what the watch missed is found out."""
        await self._list()

    async def _list(self) -> str:
        while True:
            try:
                listed = await self.api.request("GET", self.path, attempts=1, timeout=30)
            except kube.ApiError as error:
                self.breaks.append(f"list: {error}")
                await asyncio.sleep(0.5)
                continue
            at = time.monotonic()
            uids = set()
            for item in listed.get("items") or []:
                uids.add(str((item.get("metadata") or {}).get("uid")))
                self.handle(at, "LISTED", item)
            self.relisted(uids)
            self.synced.set()
            return str(listed["metadata"]["resourceVersion"])

    async def _run(self) -> None:
        version = await self._list()
        while True:
            try:
                async for _, event in self.api.watch(self.path, resource_version=version):
                    kind, item = str(event.get("type")), event.get("object") or {}
                    if kind == "ERROR":
                        raise kube.ApiError(f"watch ERROR event: {json.dumps(item)[:300]}")
                    version = str((item.get("metadata") or {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        self.handle(time.monotonic(), kind, item)
                self.breaks.append("the server ended the watch")
            except (kube.ApiError, aiohttp.ClientError, TimeoutError, ValueError) as error:
                self.breaks.append(f"{type(error).__name__}: {str(error)[:200]}")
                await asyncio.sleep(0.2)
                version = await self._list()


class _Observer:
    """One list-and-watch of ``path`` (a :class:`_Follower`) feeding ``_event`` and ``_relisted``."""

    def __init__(self, *, api: kube.Api, path: str) -> None:
        self._follower = _Follower(api=api, path=path, handle=self._event, relisted=self._relisted)

    @property
    def breaks(self) -> list[str]:
        return self._follower.breaks

    async def start(self) -> None:
        self._follower.start()
        await self._follower.synced.wait()

    async def stop(self) -> None:
        await self._follower.stop()

    async def resync(self) -> None:
        await self._follower.resync()

    def _event(self, at: float, kind: str, item: dict[str, Any]) -> None:
        raise NotImplementedError

    def _relisted(self, uids: set[str]) -> None:
        raise NotImplementedError


class PodObserver(_Observer):
    """Every worker Pod of ``namespace`` by UID, from its creation to its end.

    ``marker(name, uid)``: the marker its log must carry, asked when the Pod is first seen (on
    kwok the one planted for its name; on the real node its worker prints one from its UID).
    """

    def __init__(
        self,
        *,
        api: kube.Api,
        namespace: str,
        marker: Callable[[str, str], str | None],
        prober: Prober | None,
        on_gone: Callable[[PodHistory], None] | None = None,
    ) -> None:
        self.pods: dict[str, PodHistory] = {}
        self.marker = marker
        self.prober = prober
        self.on_gone = on_gone
        self._probes: set[asyncio.Task[None]] = set()
        super().__init__(api=api, path=f"/api/v1/namespaces/{namespace}/pods")

    async def stop(self) -> None:
        await super().stop()
        await self.settle_probes()

    async def settle_probes(self) -> None:
        while self._probes:
            await asyncio.gather(*list(self._probes), return_exceptions=True)

    def live(self) -> list[PodHistory]:
        return [p for p in self.pods.values() if not p.gone]

    def _event(self, at: float, kind: str, pod: dict[str, Any]) -> None:
        identity = pod_identity(pod)
        if identity is None:
            return
        uid, name, slug, execution = identity
        history = self.pods.get(uid)
        if history is None:
            if kind == "DELETED":
                return  # Created and deleted between two lists: never seen alive.
            history = self.pods[uid] = PodHistory(
                uid=uid,
                name=name,
                slug=slug,
                execution=execution,
                marker=self.marker(name, uid),
                first_seen=at,
                attempt=pod_attempt(pod),
            )
        if history.gone:
            return
        before = history.deleting_at
        deleting = kind == "DELETED" or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        history.observe(status=pod.get("status"), deleting=deleting, at=at)
        history.controller = history.controller or pod_controller(pod)
        history.finalizers = pod_finalizers(pod)
        if kind == "DELETED":
            history.deleted = True
        # A refused Pod is probed when it may go: deleted, and no longer held by the evidence
        # finalizer (a delete it holds, by anyone, is not yet a loss; its release is). A release
        # that ends the Pod shows as DELETED with the object as last stored, finalizer and all.
        letting_go = kind == "DELETED" or (history.deleting_at is not None and not history.held)
        if history.refused and letting_go and history.probe is None and self.prober:
            history.probe = Probe(found=None, detail="probing")
            task = asyncio.create_task(self._probe(history), name=f"probe {uid}")
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        if history.gone and self.on_gone is not None:
            self.on_gone(history)
        del before

    async def _probe(self, history: PodHistory) -> None:
        assert self.prober is not None
        history.probe = await self.prober.probe(
            slug=history.slug, execution=history.execution, uid=history.uid
        )

    def _relisted(self, uids: set[str]) -> None:
        for history in self.pods.values():
            if not history.gone and history.uid not in uids:
                history.vanished = True
                if self.on_gone is not None:
                    self.on_gone(history)


class ExecutionObserver(_Observer):
    def __init__(self, *, api: kube.Api, namespace: str) -> None:
        self.executions: dict[str, ExecutionHistory] = {}
        super().__init__(api=api, path=f"{EXECUTIONS}/namespaces/{namespace}/executions")

    def by_name(self, name: str) -> ExecutionHistory | None:
        """The newest Execution of that name the checker saw."""
        found = [e for e in self.executions.values() if e.name == name]
        return found[-1] if found else None

    def _event(self, at: float, kind: str, body: dict[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        history = self.executions.get(uid)
        if history is None:
            if kind == "DELETED":
                return
            history = self.executions[uid] = ExecutionHistory(
                uid=uid, name=str(metadata.get("name")), first_seen=at
            )
        if history.gone_at is not None:
            return
        history.observe(body=body, at=at)
        if kind == "DELETED":
            history.gone_at = at

    def _relisted(self, uids: set[str]) -> None:
        for history in self.executions.values():
            if history.gone_at is None and not history.vanished and history.uid not in uids:
                history.vanished = True


def not_a_primary(role: Any) -> str | None:
    """What a server's ``ROLE`` reply makes it, when that is not a primary with a replica in sync
    (``ROLE`` lists only those; a killed primary started again answers as a primary with none,
    until the Sentinels make it a replica); None for a primary with one."""
    if not role:
        return "a server that named no role"
    kind = role[0].decode() if isinstance(role[0], bytes) else str(role[0])
    if kind != "master":
        return f"a {kind}"
    if not role[2]:
        return "a primary with no replica in sync"
    return None


class Prober:
    """Reads, for one execution, every hash a capture may be in (one transaction: the journal's
    move to ``attempt-retained`` is atomic, so the read sees it before or after, never between).

    ``primary`` gives a client of the primary the Sentinels agree on, or raises a Redis error
    while there is none: a read from a server that only says it is a primary (one killed and
    started again, before the Sentinels make it a replica) would miss records the real one holds.
    """

    def __init__(self, *, primary: Callable[[], redis.Redis], prefix: str, parallel: int = 4) -> None:
        self.primary = primary
        self.prefix = prefix
        self._gate = asyncio.Semaphore(parallel)

    async def probe(self, *, slug: str, execution: str, uid: str) -> Probe:
        deadline = time.monotonic() + PROBE_PATIENCE
        last = ""
        async with self._gate:
            while time.monotonic() < deadline:
                try:
                    return await asyncio.to_thread(self._once, slug=slug, execution=execution, uid=uid)
                except redis.exceptions.RedisError as error:
                    last = f"{type(error).__name__}: {error}"
                await asyncio.sleep(0.5)
        return Probe(found=None, detail=last)

    async def read(self, *, slug: str, execution: str) -> tuple[list[Capture], str | None] | None:
        """Every capture stored for ``execution`` and its owner claim (an Execution UID), read as
        :meth:`probe` reads; None when Redis could not be read within the probe's patience."""
        deadline = time.monotonic() + PROBE_PATIENCE
        async with self._gate:
            while time.monotonic() < deadline:
                try:
                    return await asyncio.to_thread(self._read, slug=slug, execution=execution)
                except (redis.exceptions.RedisError, RecordError):
                    await asyncio.sleep(0.5)
        return None

    def _read(self, *, slug: str, execution: str) -> tuple[list[Capture], str | None]:
        *replies, owner = self._replies(slug=slug, execution=execution, owner=True)
        found: list[Capture] = []
        for where, raw in zip(HASHES, replies, strict=True):
            if raw is not None:
                found += captures_from(where=where, slug=slug, execution=execution, raw=str(raw))
        return found, owner_uid(owner)

    def _replies(self, *, slug: str, execution: str, owner: bool = False) -> list[Any]:
        """HGET of each hash a capture may be in (and the owner claim), in one transaction with
        ``ROLE``: only a primary with a replica in sync answers."""
        client = self.primary()
        try:
            pipe = client.pipeline(transaction=True)
            for where in HASHES:
                pipe.hget(key(self.prefix, slug, HASHES[where]), execution)
            if owner:
                pipe.hget(key(self.prefix, slug, OWNERS), execution)
            pipe.execute_command("ROLE")  # type: ignore[no-untyped-call]
            *replies, role = pipe.execute()
        finally:
            client.close()
        refused = not_a_primary(role)
        if refused:
            raise redis.exceptions.ConnectionError(f"read from {refused}")
        return list(replies)

    def _once(self, *, slug: str, execution: str, uid: str) -> Probe:
        replies = self._replies(slug=slug, execution=execution)
        at = time.monotonic()
        held = []
        for where, raw in zip(HASHES, replies, strict=True):
            if raw is None:
                continue
            held.append(where)
            try:
                found = captures_from(where=where, slug=slug, execution=execution, raw=str(raw))
            except RecordError as error:
                return Probe(found=False, detail=str(error), at=at)
            if any(c.uid == uid and c.startup is not None for c in found):
                return Probe(found=True, where=where, at=at)
        return Probe(found=False, detail=f"records held: {held or 'none'}", at=at)


_SAMPLE: Final = re.compile(r'^(agentihooks_swarm_task_(?:up|restarts_total))\{task="([^"]*)"\}\s+(\S+)$')
#: The failover restore's counters (docs/redis.md): records put back, by kind; not put back, by why.
_RESTORES: Final = re.compile(
    r'^agentihooks_swarm_evidence_(restored|restore_skipped)_total\{(?:record|reason)="([^"]*)"\}\s+(\S+)$'
)
#: The operator's log line for each record it put back (docs/redis.md, "names each record put back"),
#: with the logging module's default time: ``[2026-12-04 11:51:09,513] logger [WARNING ] Restored the
#: startup record of SLUG/EXECUTION: ...`` (or ``..., but`` when WAIT fell short).
_RESTORED_LINE: Final = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\].*?Restored the (\w+) record of "
    r"([^/\s]+)/([^\s:,]+)(:|, but)"
)


def read_memory(pid: int) -> int | None:
    """VmHWM (else VmRSS) of ``pid`` in KiB, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            values[name] = int(rest.split()[0])
    return values.get("VmHWM") or values.get("VmRSS")


def scrape(port: int) -> tuple[dict[str, float], dict[str, float]] | None:
    """``(task_up, task_restarts)`` from ``/metrics``; None when neither family exists."""
    return tasks(_metrics(port))


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as answer:
        return str(answer.read().decode(errors="replace"))


def restores(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """``(restored by record, skipped by reason)`` from a ``/metrics`` text (empty when absent)."""
    return _two_families(text, _RESTORES, first=lambda family: family == "restored")


def _two_families(
    text: str, sample: re.Pattern[str], *, first: Callable[[str], bool]
) -> tuple[dict[str, float], dict[str, float]]:
    """The samples ``sample`` matches (its groups: family, label, value) by label, those of the
    families ``first`` picks apart from the others'."""
    picked: dict[str, float] = {}
    others: dict[str, float] = {}
    for line in text.splitlines():
        match = sample.match(line.strip())
        if match:
            family, label, value = match.groups()
            (picked if first(family) else others)[label] = float(value)
    return picked, others


def restores_logged(path: Path, *, replica: str, wall_offset: float) -> list[Restore]:
    """The records an operator's log says it put back. ``wall_offset``: ``time.time() -
    time.monotonic()`` (the log's times are wall-clock, local; the histories' monotonic)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        match = _RESTORED_LINE.match(line)
        if match is None:
            continue
        stamp, millis, kind, slug, execution, how = match.groups()
        wall = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(millis) / 1000
        found.append(
            Restore(
                kind=kind,
                slug=slug,
                execution=execution,
                at=wall - wall_offset,
                replica=replica,
                short=how != ":",
            )
        )
    return found


def tasks(text: str) -> tuple[dict[str, float], dict[str, float]] | None:
    """``(task_up, task_restarts)`` from a ``/metrics`` text; None when neither family exists."""
    up, restarts = _two_families(text, _SAMPLE, first=lambda family: family.endswith("_up"))
    if not up and not restarts:
        return None
    return up, restarts


def sample(life: OperatorLife, *, metrics_port: int | None) -> None:
    """One reading of a running operator process (memory, and its metrics when it has a port)."""
    memory = read_memory(life.pid)
    if memory is not None:
        life.peak_rss_kib = max(life.peak_rss_kib, memory)
        life.samples += 1
    if metrics_port is None:
        return
    try:
        text = _metrics(metrics_port)
    except OSError:
        return
    life.scrapes += 1
    scraped = tasks(text)
    if scraped is not None:
        life.tasks_up, life.task_restarts = scraped
    life.restored, life.restore_skipped = restores(text)
