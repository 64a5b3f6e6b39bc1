"""``python -m tests.bench.takeover [--n 1000] [--repeats 3] [--kill-at 0.2]``: a leader killed
mid-burst, and how soon the standby that takes its Lease stores evidence again.

Scenario A's burst (:mod:`tests.bench.run`): N Executions refused at launch, each one's worker Pod
planted Failed as its launch left it. Two operator replicas start (the chart's Lease of 15 s);
once the leader has stored ``--kill-at`` of the records it is killed (``SIGKILL``: no release of
the Lease). The standby takes the Lease when it expires and steps its backlog from its own watches,
most urgent first. Reported per run, from the Redis ``MONITOR`` stream and the Lease:

* **takeover**: from the Lease's change (its ``acquireTime``, written by the new holder) to the
  first record the new leader stores: how warm the standby starts;
* the Lease's gap: from the kill to that change (the Lease's expiry, not the operator's work);
* from the change to the last record, and how many records came after it.

The figures are printed and written to ``--out`` (``docs/benchmarks-takeover.md``); nothing here
is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import redis

from agentihooks_swarm import store as store_
from tests.bench import kube, measure, run
from tests.support import crds, signals, watching
from tests.support.cluster import ControlPlane
from tests.support.proxy import FaultProxy
from tests.support.redis_server import RedisServer

LEASE: Final = "agentihooks-swarm-controller"
#: Gives up on a run when no record came for this long.
STALL_SECONDS: Final = 90.0


@dataclass(frozen=True, kw_only=True)
class Takeover:
    n: int
    killed_after: int
    """Records the first leader had stored when it was killed."""
    lease_gap: float
    """Kill to the Lease's change."""
    takeover: float | None
    """The Lease's change to the new leader's first stored record; None when it stored none."""
    to_last: float | None
    after: int
    """Records stored after the Lease's change."""
    complete: bool


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class TakeoverRun:
    def __init__(
        self, *, cluster: ControlPlane, redis_server: RedisServer, workdir: Path, n: int, kill_at: float
    ) -> None:
        self.cluster = cluster
        self.redis_server = redis_server
        self.workdir = workdir
        self.n = n
        self.kill_at = kill_at
        self.executions = run.execution_names(n)
        self.redis = redis.Redis(host="127.0.0.1", port=redis_server.port, decode_responses=True)
        self.key = store_.key(run.PREFIX, run.SLUG, store_.STARTUP_DIAGNOSTICS)
        self.namespace = ""

    async def perform(self, label: str) -> Takeover:
        async with kube.Api(self.cluster) as api:
            self.namespace = await run.create_namespace(api, name=f"bench-takeover-{label}")
            observer = kube.Observer(api=api, namespace=self.namespace)
            await observer.start()
            try:
                await run.refused_burst(
                    api,
                    observer,
                    cluster=self.cluster,
                    namespace=self.namespace,
                    executions=self.executions,
                    finalizer=run.makes_owned_pods(run.REPO),
                )
                return await self._measure(api, label)
            finally:
                await observer.stop()
                self.redis.close()

    async def _lease(self, api: kube.Api) -> dict[str, Any]:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{LEASE}"
        found: dict[str, Any] = await api.request("GET", path)
        spec: dict[str, Any] = found.get("spec") or {}
        return spec

    async def _measure(self, api: kube.Api, label: str) -> Takeover:
        self.redis.flushall()
        monitor = measure.Monitor(port=self.redis_server.port, path=self.workdir / f"{label}.monitor")
        proxy = FaultProxy(upstream=self.cluster.server, ca_file=self.cluster.ca_file).start_in_thread()
        kubeconfig = proxy.kubeconfig(
            token=self.cluster.admin_token,
            path=self.workdir / f"{label}.kubeconfig",
            namespace=self.namespace,
        )
        replicas = [
            run.BenchOperator(
                kubeconfig=kubeconfig,
                redis_url=self.redis_server.url,
                namespace=self.namespace,
                log_path=self.workdir / f"{label}.operator-{i}.log",
                env=run.CHART_DEFAULTS,
            )
            for i in (1, 2)
        ]
        try:
            for replica in replicas:
                replica.start()
            leader = await self._leader(api, replicas)

            async def enough() -> bool:
                return int(self.redis.hlen(self.key)) >= self.kill_at * self.n

            await watching.eventually(enough, what="the leader's first records", timeout=STALL_SECONDS)
            leader.kill()
            killed_at = time.time()
            killed_after = int(self.redis.hlen(self.key))
            holder = f"-{leader.popen.pid}" if leader.popen is not None else ""
            spec: dict[str, Any] = {}

            async def changed() -> bool:
                spec.update(await self._lease(api))
                return not str(spec.get("holderIdentity") or "").endswith(holder)

            await watching.eventually(changed, what="the standby to take the Lease", timeout=STALL_SECONDS)
            changed_at = _epoch(str(spec["acquireTime"]))
            complete = await self._until_stored()
        finally:
            for replica in replicas:
                replica.stop()
            proxy.stop_thread()
            monitor.stop()
        stored = monitor.writes(command="hsetnx", key=self.key)
        after = sorted(at for at in stored.values() if at >= changed_at)
        return Takeover(
            n=self.n,
            killed_after=killed_after,
            lease_gap=changed_at - killed_at,
            takeover=after[0] - changed_at if after else None,
            to_last=after[-1] - changed_at if after else None,
            after=len(after),
            complete=complete,
        )

    async def _leader(self, api: kube.Api, replicas: list[run.BenchOperator]) -> run.BenchOperator:
        """The replica whose identity (host name and process id) holds the Lease."""

        async def holder() -> run.BenchOperator | None:
            with_lease = str((await self._lease_or_empty(api)).get("holderIdentity") or "")
            for replica in replicas:
                if replica.popen is not None and with_lease.endswith(f"-{replica.popen.pid}"):
                    return replica
            return None

        return await watching.eventually(holder, what="a replica to take the Lease")

    async def _lease_or_empty(self, api: kube.Api) -> dict[str, Any]:
        try:
            return await self._lease(api)
        except kube.ApiError:
            return {}

    async def _until_stored(self) -> bool:
        count, moved = -1, time.monotonic()
        while time.monotonic() - moved < STALL_SECONDS:
            now = int(self.redis.hlen(self.key))
            if now >= self.n:
                return True
            if now != count:
                count, moved = now, time.monotonic()
            await asyncio.sleep(0.2)
        return False


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def _write(results: list[Takeover], out: Path, *, command: str) -> None:
    takeovers = [r.takeover for r in results if r.takeover is not None]
    median = statistics.median(takeovers) if takeovers else None
    lines = [
        "# A leader killed mid-burst: the standby's takeover",
        "",
        f"*Generated by `{command}` (run by `make bench`); do not edit by hand.*",
        "",
        "Scenario A's burst of refused workers with two replicas on the chart's 15 s Lease; the leader "
        "is killed (`SIGKILL`) once it has stored the given share of the records. **Takeover** is "
        "from the Lease's change (its `acquireTime`, written by the new holder) to the first record "
        "the new leader stores; the gap before it is the Lease's expiry.",
        "",
        "| N | records before the kill | kill to Lease change | takeover | Lease change to last record "
        "| records after | complete |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r.n} | {r.killed_after} | {r.lease_gap:.1f} s | {_figure(r.takeover)} | "
            f"{_figure(r.to_last)} | {r.after} | {'yes' if r.complete else 'no'} |"
            for r in results
        ),
        "",
        f"Median takeover of {len(takeovers)} runs: **{_figure(median)}**.",
        "",
    ]
    out.write_text("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    signals.exit_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m tests.bench.takeover", description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kill-at", type=float, default=0.2, help="share of records stored before the kill")
    parser.add_argument("--out", type=Path, default=run.REPO / "docs" / "benchmarks-takeover.md")
    args = parser.parse_args(argv)
    command = f"python -m tests.bench.takeover --n {args.n} --repeats {args.repeats} --kill-at {args.kill_at}"
    with tempfile.TemporaryDirectory(prefix="bench-takeover-") as scratch:
        workdir = Path(scratch)
        cluster, owned = run.running_cluster(workdir)
        results: list[Takeover] = []
        namespaces: list[str] = []
        try:
            crds.apply(cluster)
            with RedisServer() as redis_server:
                for repeat in range(args.repeats):
                    one = TakeoverRun(
                        cluster=cluster,
                        redis_server=redis_server,
                        workdir=workdir,
                        n=args.n,
                        kill_at=args.kill_at,
                    )
                    try:
                        results.append(asyncio.run(one.perform(f"r{repeat}-{int(time.time())}")))
                    finally:
                        namespaces.extend([one.namespace] if one.namespace else [])
                    r = results[-1]
                    print(
                        f"takeover: N={r.n} killed after {r.killed_after}, Lease changed {r.lease_gap:.1f} s "
                        f"later, first record {_figure(r.takeover)} after it, last {_figure(r.to_last)}, "
                        f"{r.after} after, complete={r.complete}",
                        flush=True,
                    )
        finally:
            if owned:
                cluster.stop()
            else:
                for namespace in namespaces:
                    asyncio.run(run.remove_namespace(cluster, namespace))
    _write(results, args.out, command=command)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
