"""Everything the soak runs against, started and stopped in one place.

* A control plane of its own (kube-apiserver, etcd, the scheduler and controller-manager, and kwok
  or the real node): the soak kills kube-apiserver and kwok, so it never borrows a shared one.
* The Sentinel set (:mod:`tests.soak.redis_set`) and the operators' network to it
  (:mod:`tests.soak.redis_net`).
* Two operator replicas as processes (``python -m agentihooks_swarm run``, one Lease between
  them, as the chart runs them), each behind its own :class:`~tests.support.proxy.FaultProxy` to the API
  server and its own proxies to Redis, in Sentinel mode with ``REDIS_MIN_REPLICAS=1``
  (:meth:`Rig.set_min_replicas` changes it for their next start: the plan rolls them to 0 midway,
  see :mod:`tests.soak.plan`).

:class:`Rig` is a context manager; its exit stops every process it started, whatever failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml  # type: ignore[import-untyped, unused-ignore]

from tests.bench.run import CHART_DEFAULTS
from tests.soak.checker.model import OperatorLife
from tests.soak.checker.observe import sample
from tests.soak.plan import REPLICAS, Node
from tests.soak.redis_net import RedisNet
from tests.soak.redis_set import Gate, SentinelSet
from tests.support import crds
from tests.support.cluster import ClusterError, ControlPlane, nodes
from tests.support.operator_process import OperatorProcess
from tests.support.proxy import FaultProxy
from tests.support.redis_server import free_port

NAMESPACE: Final = "soak"
LEASE: Final = "agentihooks-swarm-controller"
#: The ClusterLogs that tests/support/cluster/kwok_node.py gives kwok for Pods without a planted log.
_FALLBACK: Final = "agentihooks-no-output"
#: The operators' settings: the chart's (values.yaml), in Sentinel mode with one replica's WAIT.
#: Not the test tooling's quicker ones: with a 6 s Lease a leader under this load let its hold
#: lapse between renewals and refused every launch as "not the leader" for minutes.
OPERATOR_ENV: Final = {
    "AGENTIHOOKS_SWARM_REDIS_MODE": "sentinel",
    "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS": "1",
    "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": "2",
    "AGENTIHOOKS_SWARM_REDIS_TIMEOUT_SECONDS": "5",
    **CHART_DEFAULTS,
}


@dataclass
class Replica:
    """One operator replica: its process, its API proxy, and each run of its process."""

    name: str
    proxy: FaultProxy
    operator: OperatorProcess
    metrics_port: int
    lives: list[OperatorLife] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    held_down: bool = False
    """Killed by a fault and not started again yet (no supervisor may start it meanwhile)."""

    @property
    def life(self) -> OperatorLife | None:
        return self.lives[-1] if self.lives else None

    @property
    def pid(self) -> int | None:
        popen = self.operator.popen
        return popen.pid if popen is not None and popen.poll() is None else None

    def start(self) -> None:
        """Start the process (blocks until it logged that it started)."""
        with self.lock:
            self._start()

    def _start(self) -> None:
        self.operator.start(timeout=90)
        assert self.operator.popen is not None
        life = OperatorLife(replica=self.name, pid=self.operator.popen.pid)
        self.lives.append(life)
        sample(life, metrics_port=None)  # A life may be short: read it once at once.

    def kill(self) -> None:
        """SIGKILL (a crash)."""
        with self.lock:
            self._ended()
            self.held_down = True
            self.operator.kill()
            self._exit_code()

    def restart(self, *, graceful: bool) -> None:
        """Stop (SIGTERM, or SIGKILL) and start again: a rollout, or a supervisor after a crash."""
        with self.lock:
            self._ended()
            if graceful:
                self.operator.stop()
            else:
                self.operator.kill()
            self._exit_code()
            self._start()

    def ensure_running(self) -> bool:
        """Start it again if it is not running (after a fault's kill, or it died by itself);
        whether it had to."""
        with self.lock:
            self.held_down = False
            if self.operator.running:
                return False
            self._exit_code()
            self._start()
            return True

    def pause(self) -> None:
        """SIGSTOP the process, if it runs: it does nothing more until :meth:`resume`."""
        with self.lock:
            if self.pid is not None:
                os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        with self.lock:
            if self.pid is not None:
                os.kill(self.pid, signal.SIGCONT)

    def died(self) -> bool:
        """It is not running and no fault stopped it: it exited by itself."""
        return not self.held_down and not self.lock.locked() and not self.operator.running

    def _ended(self) -> None:
        if self.life is not None and self.operator.running:
            self.life.killed_by_soak = True

    def _exit_code(self) -> None:
        popen = self.operator.popen
        if self.life is not None and popen is not None and self.life.exit_code is None:
            self.life.exit_code = popen.poll()


class Rig:
    def __init__(self, *, node: Node, workdir: Path) -> None:
        self.node: Node = node
        self.workdir = workdir
        self.plane: ControlPlane | None = None
        self.redis: SentinelSet | None = None
        self.net: RedisNet | None = None
        self.replicas: dict[str, Replica] = {}
        #: ``REDIS_MIN_REPLICAS`` the operators run with (from their next start when changed).
        self.min_replicas = int(OPERATOR_ENV["AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS"])
        self._stack = contextlib.ExitStack()

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Rig:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        began = time.monotonic()
        plane = self.plane = nodes.start(kind=self.node, workdir=self.workdir / "cluster")
        self._stack.callback(plane.stop)
        print(f"soak: control plane up in {time.monotonic() - began:.0f}s ({plane.workdir})", flush=True)
        if self.node == "kwok":
            _kwok_without_fallback_log(plane)
        crds.apply(plane)
        _namespace(plane, NAMESPACE)
        self.redis = SentinelSet().start()
        self._stack.callback(self.redis.close)
        self.net = RedisNet(
            servers=self.redis.server_ports, sentinels=self.redis.sentinel_ports, clients=REPLICAS
        ).start()
        self._stack.callback(self.net.close)
        for name in REPLICAS:
            proxy = FaultProxy(upstream=plane.server, ca_file=plane.ca_file).start_in_thread()
            self._stack.callback(proxy.stop_thread)
            metrics_port = free_port()
            operator = OperatorProcess(
                kubeconfig=proxy.kubeconfig(
                    token=plane.admin_token,
                    path=self.workdir / f"operator-{name}.kubeconfig",
                    namespace=NAMESPACE,
                ),
                redis_url="redis://127.0.0.1:1/0",  # Not used in sentinel mode.
                namespace=NAMESPACE,
                log_path=self.workdir / f"operator-{name}.log",
                env={
                    **OPERATOR_ENV,
                    "AGENTIHOOKS_SWARM_REDIS_SENTINELS": self.net.sentinel_addresses(name),
                    "AGENTIHOOKS_SWARM_METRICS_PORT": str(metrics_port),
                },
                verbose=False,
            )
            replica = self.replicas[name] = Replica(
                name=name, proxy=proxy, operator=operator, metrics_port=metrics_port
            )
            self._stack.callback(self._stop_replica, replica)
        starting = [threading.Thread(target=r.start, name=f"start {r.name}") for r in self.replicas.values()]
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        for replica in self.replicas.values():
            if not replica.operator.running:
                raise ClusterError(f"operator {replica.name} did not start:\n{replica.operator.tail()}")
        print(f"soak: rig up in {time.monotonic() - began:.0f}s", flush=True)

    @staticmethod
    def _stop_replica(replica: Replica) -> None:
        with replica.lock:
            replica._ended()
            replica.operator.kill()
            replica._exit_code()

    # -- what faults and checks need ---------------------------------------------------------

    @property
    def cluster(self) -> ControlPlane:
        assert self.plane is not None
        return self.plane

    @property
    def sentinel_set(self) -> SentinelSet:
        assert self.redis is not None
        return self.redis

    @property
    def network(self) -> RedisNet:
        assert self.net is not None
        return self.net

    def leader(self) -> Replica | None:
        """The replica holding the Lease, if its holder is one of the running processes."""
        try:
            status, raw = self.cluster.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}", timeout=5
            )
        except OSError:  # The API server is being restarted.
            return None
        if status != 200:
            return None
        holder = str((json.loads(raw).get("spec") or {}).get("holderIdentity") or "")
        for replica in self.replicas.values():
            if replica.pid is not None and holder == f"{socket.gethostname()}-{replica.pid}":
                return replica
        return None

    @contextlib.contextmanager
    def operators_paused(self) -> Iterator[None]:
        """Every operator stopped where it is (SIGSTOP) for the block, and let go after it."""
        try:
            for replica in self.replicas.values():
                replica.pause()
            yield
        finally:
            for replica in self.replicas.values():
                replica.resume()

    def set_min_replicas(self, replicas: int) -> None:
        """``REDIS_MIN_REPLICAS`` for the operators' next start (a rollout starts them again)."""
        self.min_replicas = replicas
        for replica in self.replicas.values():
            replica.operator.extra_env["AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS"] = str(replicas)

    def user_env(self) -> dict[str, str]:
        """What a person has in an operator's container (``kubectl exec deployment/...``, which
        picks one running Pod): that replica's environment, its API server credentials through
        its fault proxy, and its proxies to the Sentinels. A command run there meets the faults
        that replica meets."""
        running = [r for r in self.replicas.values() if r.pid is not None]
        replica = (running or list(self.replicas.values()))[0]
        return replica.operator.environment()

    def replication_held(self) -> bool:
        """Whether a ``redis-lost-writes`` fault holds the replicas' links now."""
        return self.sentinel_set.holding.is_set()

    def holds_done(self) -> int:
        """How many ``redis-lost-writes`` holds have ended."""
        return self.sentinel_set.holds_done

    @property
    def user_gate(self) -> Gate:
        """What a person's write to Redis passes (closed while a ``redis-lost-writes`` fault is
        about to hold, or holds, the replicas' links)."""
        return self.sentinel_set.gate

    def lives(self) -> list[OperatorLife]:
        return [life for replica in self.replicas.values() for life in replica.lives]

    def redis_env(self) -> dict[str, str]:
        """What a person sets to read the records (the real Sentinels, not an operator's proxies)."""
        return {
            "AGENTIHOOKS_SWARM_REDIS_MODE": "sentinel",
            "AGENTIHOOKS_SWARM_REDIS_SENTINELS": self.sentinel_set.addresses,
        }


def _namespace(plane: ControlPlane, name: str) -> None:
    plane.request_json(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    deadline = time.monotonic() + 60
    while plane.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {name}: no default ServiceAccount after 60s")
        time.sleep(0.1)


def _kwok_without_fallback_log(plane: ControlPlane) -> None:
    """kwok as the soak needs it: without the cluster's fallback log for Pods that have none.

    kwok finds a Pod's planted log through an informer that is empty for a moment after kwok
    starts; meanwhile the fallback answers an empty log, and a capture made then would hold an
    empty log no kubelet would serve (a restarted kubelet still reads the container's log file).
    Every worker of the soak has a planted log, so without the fallback such a read fails
    instead, as a read of a kubelet that is down does, and the operator reads it again.
    """
    path = plane.workdir / "kwok.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    kept = [
        d for d in documents if not (d.get("kind") == "ClusterLogs" and d["metadata"]["name"] == _FALLBACK)
    ]
    if len(kept) == len(documents):
        raise ClusterError(f"{path} has no ClusterLogs {_FALLBACK} to remove")
    path.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    plane.restart("kwok")
    deadline = time.monotonic() + 120
    while not plane.serves("kwok"):
        if time.monotonic() > deadline:
            raise ClusterError("kwok did not serve again after its restart without the fallback log")
        time.sleep(0.2)
