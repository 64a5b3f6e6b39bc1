"""The control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, from the
binaries ``tests/tools/binaries/build.sh`` builds, with all state in one work directory; then one node
(:mod:`.kwok_node` or :mod:`.real_node`, see :func:`start`).

* kube-apiserver runs with ``--authorization-mode=Node,RBAC``, the PodSecurity and
  NodeRestriction admission plugins, ServiceAccount token signing (TokenRequest works), a CA made
  with the ``openssl`` CLI (:mod:`.pki`), an admin client certificate (``O=system:masters``) and a
  static admin bearer token (``--token-auth-file``) for clients that cannot present a client
  certificate, such as a TLS-terminating fault proxy.
* kube-controller-manager runs the garbage collector, namespace, ServiceAccount, root CA
  publisher, ClusterRole aggregation, Deployment and ReplicaSet controllers; with a real node also
  StatefulSet, Endpoints/EndpointSlice (Services), PersistentVolume binding and node lifecycle
  (which lifts the node's ``not-ready`` taint).
* kube-scheduler binds Pods to the node.

With the kwok node everything listens on 127.0.0.1. With the real node kube-apiserver listens on
and advertises the node's address (:data:`.host.NODE_IP`, a /32 on ``lo``), so that the
``kubernetes`` Service reaches it from a Pod's network namespace.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import yaml  # type: ignore[import-untyped, unused-ignore]

from tests.support import progress
from tests.support.cluster import host as _host, kwok_node, real_node
from tests.support.cluster.pki import ADMIN_USER, make_pki, write_kubeconfig
from tests.support.cluster.processes import (
    Child,
    ClusterError,
    Starter,
    free_ports,
    kill_groups,
    pid_alive,
    pid_runs_from,
)

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
BUILD_SCRIPT: Final = REPO_ROOT / "tests" / "tools" / "binaries" / "build.sh"
KUBERNETES_VERSION: Final = "v1.37.2"
#: The oldest Kubernetes the chart allows (its ``kubeVersion``; tests/tools/binaries/compat/go.mod).
COMPAT_KUBERNETES_VERSION: Final = "v1.34.4"
#: ``compat`` makes a kwok cluster run :data:`COMPAT_KUBERNETES_VERSION`'s kube-apiserver,
#: kube-controller-manager and kube-scheduler (``make test-compat``); unset or ``newest``,
#: :data:`KUBERNETES_VERSION`'s.
KUBERNETES_ENV: Final = "AGENTIHOOKS_SWARM_KUBERNETES"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR: Final = "10.96.0.0/16"
POD_CIDR: Final = "10.244.0.0/16"

NodeKind = Literal["kwok", "real"]
Kubernetes = Literal["newest", "compat"]

_CONTROLLERS: Final = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "deployment-controller",
    "replicaset-controller",
)
_REAL_NODE_CONTROLLERS: Final = (
    "statefulset-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "node-lifecycle-controller",
)


def kubernetes() -> Kubernetes:
    """The Kubernetes a kwok cluster runs, as :data:`KUBERNETES_ENV` asks."""
    asked = os.environ.get(KUBERNETES_ENV) or "newest"
    if asked not in ("newest", "compat"):
        raise ClusterError(f"{KUBERNETES_ENV}={asked}: 'compat' (the oldest the chart allows) or 'newest'")
    return "compat" if asked == "compat" else "newest"


def build(*, quiet: bool = False, only: NodeKind | None = None) -> Path:
    """Build the binaries (once; cached) with ``tests/tools/binaries/build.sh`` and return the bin dir;
    ``only="kwok"`` builds only what a kwok cluster runs (no kubelet, kube-proxy, CoreDNS), of the
    Kubernetes :func:`kubernetes` names. The compat set has no real node."""
    if only == "kwok":
        which = ["--for", "compat" if kubernetes() == "compat" else "kwok"]
    elif kubernetes() == "compat":
        raise ClusterError(f"{KUBERNETES_ENV}=compat runs kwok clusters only: the real node is the newest's")
    else:
        which = []
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *which],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if quiet else None,
        check=False,
    )
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace")[-4000:] if quiet else "its output is above"
        raise ClusterError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}: {detail}")
    lines = result.stdout.decode().strip().splitlines()
    if not lines:
        raise ClusterError(f"{BUILD_SCRIPT} printed no bin directory")
    bin_dir = Path(lines[-1])
    if not (bin_dir / "kube-apiserver").exists():
        raise ClusterError(f"{BUILD_SCRIPT} printed {bin_dir}, which has no kube-apiserver")
    return bin_dir


@dataclass
class ControlPlane:
    """A running control plane. ``stop()`` ends every process it started."""

    workdir: Path
    bin_dir: Path
    kubeconfig: Path
    """Admin kubeconfig (client certificate, group system:masters)."""
    token_kubeconfig: Path
    """Admin kubeconfig with the static bearer token instead of the client certificate."""
    server: str
    ca_file: Path
    admin_token: str
    kwok_url: str
    """kwok's kubelet-like server (TLS with the test CA, plain HTTP on the same port); "" on a
    real node."""
    node_name: str
    pod_logs_dir: Path
    """kwok: where planted container logs live (tests/support/pods.py: plant_log); real node: the
    kubelet's ``podLogsDir``."""
    node_kind: NodeKind = "kwok"
    children: list[Child] = field(default_factory=list)
    detached: bool = False
    """Started by the CLI to outlive it; stop() is then only called by ``down``."""

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill every child's process group, newest first, and wait until they are gone."""
        if self.node_kind == "real":
            real_node.stop(workdir=self.workdir, children=self.children, bin_dir=self.bin_dir)
        children = [c for c in reversed(self.children) if c.popen is not None or self._owns(c)]
        kill_groups(children)
        if self.node_kind == "real":
            _host.release(workdir=self.workdir)
        _LIVE.pop(id(self), None)

    def _owns(self, child: Child) -> bool:
        return pid_alive(child.pid) and pid_runs_from(child.pid, self.bin_dir)

    def dead_children(self) -> list[Child]:
        return [c for c in self.children if not c.alive()]

    def restart(self, name: str) -> Child:
        """SIGKILL the child ``name`` (``kube-apiserver``, ``kwok``, ``kubelet``, ``containerd``) and
        start it again with the same flags, ports and data, as a supervisor restarts a crashed
        process. Returns at once; :meth:`serves` tells when it does its job again.

        containerd is killed alone, not with its process group: its shims, and so the running
        containers, outlive it as they outlive a real containerd restart.
        """
        [child] = [c for c in self.children if c.name == name]
        starter = Starter(
            workdir=self.workdir, children=self.children, detached=self.detached, deadline=time.monotonic()
        )
        return starter.respawn(child, group=name != "containerd")

    def serves(self, name: str) -> bool:
        """One check (no waiting) that the child ``name`` does its job: kube-apiserver is ready,
        kwok is healthy and serves planted logs, the kubelet is healthy, containerd answers."""
        try:
            if name == "kube-apiserver":
                return bool(api_ok(self, "/readyz"))
            if name == "kwok":
                port = int(self.kwok_url.rsplit(":", 1)[1])
                healthy = http_ok(f"http://127.0.0.1:{port}/healthz", b"ok")
                return bool(healthy) and self.kwok_get(kwok_node.READINESS_LOG_PATH, timeout=2)[0] == 200
            if name == "kubelet":
                config = yaml.safe_load((self.workdir / "kubelet.yaml").read_text())
                return bool(http_ok(f"http://127.0.0.1:{config['healthzPort']}/healthz", b"ok"))
            if name == "containerd":
                return bool(real_node.ctr(self.workdir, "version", timeout=5))
        except (OSError, http.client.HTTPException, ClusterError):
            return False
        raise ValueError(f"no health check for {name!r}")

    # -- REST -----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        """One blocking HTTPS request to kube-apiserver (admin bearer token unless ``token``)."""
        host, port = self.server.removeprefix("https://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(self.ca_file))
        connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=timeout)
        headers = {"Authorization": f"Bearer {token or self.admin_token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def request_json(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, *, ok: Iterable[int] = (200, 201)
    ) -> dict[str, Any]:
        status, data = self.request(method, path, body)
        if status not in set(ok):
            raise ClusterError(f"{method} {path} answered {status}: {data[:2000].decode(errors='replace')}")
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def kwok_get(self, path: str, *, timeout: float = 10.0) -> tuple[int, bytes]:
        """A plain-HTTP GET to kwok's kubelet-like server (same port as its TLS listener)."""
        host, port = self.kwok_url.removeprefix("https://").rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def service_account_kubeconfig(
        self,
        *,
        namespace: str,
        name: str,
        path: Path,
        expiration_seconds: int = 3600,
        server: str | None = None,
    ) -> Path:
        """Write a kubeconfig that authenticates as ServiceAccount ``namespace/name``.

        The bearer token comes from the TokenRequest API, so RBAC applies to it as to a Pod's
        token. ``server`` points the kubeconfig elsewhere (a proxy) while keeping the CA.
        """
        token_request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        answer = self.request_json(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", token_request
        )
        return write_kubeconfig(
            path=path,
            server=server or self.server,
            ca_file=self.ca_file,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=answer["status"]["token"],
            namespace=namespace,
        )

    # -- state (CLI) ----------------------------------------------------------------------

    def save(self, path: Path) -> None:
        data = {
            "workdir": str(self.workdir),
            "bin_dir": str(self.bin_dir),
            "kubeconfig": str(self.kubeconfig),
            "token_kubeconfig": str(self.token_kubeconfig),
            "server": self.server,
            "ca_file": str(self.ca_file),
            "admin_token": self.admin_token,
            "kwok_url": self.kwok_url,
            "node_name": self.node_name,
            "pod_logs_dir": str(self.pod_logs_dir),
            "node_kind": self.node_kind,
            "children": [{"name": c.name, "pid": c.pid, "log": str(c.log)} for c in self.children],
        }
        path.write_text(json.dumps(data, indent=2) + "\n")
        path.chmod(0o600)

    @classmethod
    def load(cls, path: Path) -> ControlPlane:
        data = json.loads(path.read_text())
        return cls(
            workdir=Path(data["workdir"]),
            bin_dir=Path(data["bin_dir"]),
            kubeconfig=Path(data["kubeconfig"]),
            token_kubeconfig=Path(data["token_kubeconfig"]),
            server=data["server"],
            ca_file=Path(data["ca_file"]),
            admin_token=data["admin_token"],
            kwok_url=data["kwok_url"],
            node_name=data["node_name"],
            pod_logs_dir=Path(data["pod_logs_dir"]),
            node_kind=data.get("node_kind", "kwok"),
            children=[Child(name=c["name"], pid=c["pid"], log=Path(c["log"])) for c in data["children"]],
            detached=True,
        )

    def healthy(self) -> bool:
        if any(not c.alive() for c in self.children):
            return False
        try:
            status, body = self.request("GET", "/readyz", timeout=5)
        except OSError:
            return False
        return status == 200 and body.strip() == b"ok"


_LIVE: dict[int, ControlPlane] = {}


@atexit.register
def _stop_leftovers() -> None:
    for plane in list(_LIVE.values()):
        if not plane.detached:
            plane.stop()


#: The stages :func:`start` reports, by node: certificates, etcd and kube-apiserver; the node's;
#: the controllers, scheduler and tokens.
STAGES: Final[dict[NodeKind, int]] = {"kwok": 3 + 1 + 1, "real": 3 + real_node.STAGES + 1}


def start(
    *,
    workdir: Path,
    bin_dir: Path,
    timeout: float = 120.0,
    detached: bool = False,
    node: NodeKind = "kwok",
    images: real_node.Images | None = None,
    out: TextIO | None = None,
    profiling: bool = False,
) -> ControlPlane:
    """Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the node.

    Returns once /readyz is ok, the node is Ready and untainted, the scheduler is healthy and the
    ``default`` ServiceAccount of namespace ``default`` exists and gets tokens. A port taken by
    someone else between choosing and binding it costs a retry with fresh ports. ``node="real"``
    first claims this machine's one real node (:func:`.host.claim`, which cleans up after a run
    that was killed), prepares the host and loads ``images`` into the node. With ``out``, one
    line per stage goes there (:mod:`tests.support.progress`). ``profiling``: kube-apiserver serves
    ``/debug/pprof`` (to ``system:masters`` only), for the bench's ``--profile``.
    """
    if node == "real" and images is None:
        raise ValueError("a real node needs its images (real_node.Images)")
    workdir = workdir.resolve()
    bin_dir = bin_dir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + (timeout if node == "kwok" else max(timeout, 300.0))
    steps = progress.Progress(total=STAGES[node], out=out)
    steps.say(f"cluster: starting the control plane and a {node} node; logs in {workdir / 'log'}")
    if node == "real":
        _host.claim(workdir=workdir)
    attempts = 3
    try:
        for attempt in range(1, attempts + 1):
            try:
                return _start_once(
                    workdir=workdir,
                    bin_dir=bin_dir,
                    deadline=deadline,
                    detached=detached,
                    node=node,
                    images=images,
                    steps=steps,
                    profiling=profiling,
                )
            except ClusterError as error:
                if attempt == attempts or "address already in use" not in str(error):
                    raise
                shutil.rmtree(workdir / "etcd", ignore_errors=True)
                (workdir / "log").rename(workdir / f"log.failed-{attempt}")
                steps.again(
                    f"cluster: a port was taken before its server bound it; try {attempt + 1}/{attempts}"
                )
    except BaseException:
        if node == "real":
            _host.release(workdir=workdir)
        raise
    raise AssertionError("unreachable")


def _start_once(
    *,
    workdir: Path,
    bin_dir: Path,
    deadline: float,
    detached: bool,
    node: NodeKind,
    images: real_node.Images | None,
    steps: progress.Progress,
    profiling: bool = False,
) -> ControlPlane:
    node_name = kwok_node.NODE_NAME if node == "kwok" else real_node.NODE_NAME
    address = "127.0.0.1" if node == "kwok" else _host.NODE_IP
    pki = workdir / "pki"
    with steps.stage("certificates (openssl)"):
        make_pki(pki, node_name=node_name, node_ip=address, real_node=node == "real")
    admin_token = secrets.token_hex(24)
    (pki / "tokens.csv").write_text(f'{admin_token},{ADMIN_USER},{ADMIN_USER}-uid,"system:masters"\n')
    (pki / "tokens.csv").chmod(0o600)
    etcd_port, etcd_peer_port, api_port, node_port, kcm_port, scheduler_port = free_ports(6)
    server = f"https://{address}:{api_port}"
    kubeconfig = write_kubeconfig(
        path=workdir / "admin.kubeconfig",
        server=server,
        ca_file=pki / "ca.crt",
        user=ADMIN_USER,
        client_certificate=pki / "admin.crt",
        client_key=pki / "admin.key",
    )
    token_kubeconfig = write_kubeconfig(
        path=workdir / "admin-token.kubeconfig",
        server=server,
        ca_file=pki / "ca.crt",
        user=ADMIN_USER,
        token=admin_token,
    )
    (workdir / "pod-logs").mkdir(exist_ok=True)
    plane = ControlPlane(
        workdir=workdir,
        bin_dir=bin_dir,
        kubeconfig=kubeconfig,
        token_kubeconfig=token_kubeconfig,
        server=server,
        ca_file=pki / "ca.crt",
        admin_token=admin_token,
        kwok_url=f"https://127.0.0.1:{node_port}" if node == "kwok" else "",
        node_name=node_name,
        pod_logs_dir=workdir / "pod-logs",
        node_kind=node,
        detached=detached,
    )
    _LIVE[id(plane)] = plane
    starter = Starter(workdir=workdir, children=plane.children, detached=detached, deadline=deadline)
    try:
        _start_control_plane(
            plane,
            starter,
            pki=pki,
            ports={
                "etcd": etcd_port,
                "etcd-peer": etcd_peer_port,
                "kcm": kcm_port,
                "scheduler": scheduler_port,
                "apiserver": api_port,
            },
            steps=steps,
            profiling=profiling,
        )
        if node == "kwok":
            with steps.stage("kwok node (serving planted logs)"):
                kwok_node.start(plane, starter, pki=pki, port=node_port)
        else:
            assert images is not None
            real_node.start(plane, starter, pki=pki, images=images, steps=steps)
        with steps.stage("controllers, scheduler and ServiceAccount tokens"):
            _wait_usable(plane, starter, kcm_port=kcm_port, scheduler_port=scheduler_port)
    except BaseException:
        plane.stop()
        raise
    return plane


def _start_control_plane(
    plane: ControlPlane,
    starter: Starter,
    *,
    pki: Path,
    ports: Mapping[str, int],
    steps: progress.Progress,
    profiling: bool = False,
) -> None:
    """etcd, then kube-apiserver, each up before the next; kube-controller-manager and
    kube-scheduler are started last and waited for later (:func:`_wait_usable`), while the node
    starts."""
    binary = plane.bin_dir.joinpath
    real = plane.node_kind == "real"
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    with steps.stage("etcd"):
        starter.spawn(
            "etcd",
            [
                str(binary("etcd")),
                f"--data-dir={plane.workdir / 'etcd'}",
                f"--listen-client-url={etcd_url}",
                f"--listen-peer-url=http://127.0.0.1:{ports['etcd-peer']}",
            ],
        )
        starter.wait("etcd /health", lambda: http_ok(f"{etcd_url}/health", b'"health":"true"'))

    with steps.stage("kube-apiserver"):
        _start_apiserver(
            plane, starter, pki=pki, etcd_url=etcd_url, port=ports["apiserver"], profiling=profiling
        )

    kubeconfig = str(plane.kubeconfig)
    controllers = _CONTROLLERS + (_REAL_NODE_CONTROLLERS if real else ())
    starter.spawn(
        "kube-controller-manager",
        [
            str(binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            "--leader-elect=false",
            f"--controllers={','.join(controllers)}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--profiling=false",
            *([f"--cluster-cidr={POD_CIDR}", f"--service-cluster-ip-range={SERVICE_CIDR}"] if real else []),
        ],
    )
    starter.spawn(
        "kube-scheduler",
        [
            str(binary("kube-scheduler")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
        ],
    )


#: The API server's audit log (in the cluster's workdir): who deleted which Pod, and when.
AUDIT_LOG = "audit.jsonl"

#: Only Pod deletes are audited, at Metadata level: a handful of lines per test, and what a finding
#: about a Pod deleted by nobody known needs (the user, its agent and the time of each delete).
_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [delete, deletecollection]
  resources:
  - group: ""
    resources: [pods]
- level: None
"""


def _audit_policy(workdir: Path) -> Path:
    path = workdir / "audit-policy.yaml"
    path.write_text(_AUDIT_POLICY)
    return path


def _start_apiserver(
    plane: ControlPlane, starter: Starter, *, pki: Path, etcd_url: str, port: int, profiling: bool = False
) -> None:
    binary = plane.bin_dir.joinpath
    real = plane.node_kind == "real"
    address = plane.server.removeprefix("https://").rsplit(":", 1)[0]
    starter.spawn(
        "kube-apiserver",
        [
            str(binary("kube-apiserver")),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,PodSecurity",
            "--allow-privileged=true",  # as in kind: Pod Security admission decides, not this flag
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            f"--audit-policy-file={_audit_policy(plane.workdir)}",
            f"--audit-log-path={plane.workdir / AUDIT_LOG}",
            "--audit-log-format=json",
            "--kubelet-preferred-address-types=InternalIP",
            # On 127.0.0.1 the default reconciler would publish a loopback `kubernetes` Endpoints,
            # which validation rejects; the kwok tests need no `kubernetes` Service. The real
            # node's Pods reach the apiserver through it, at the node's address.
            *([] if real else ["--endpoint-reconciler-type=none"]),
            f"--profiling={str(profiling).lower()}",
        ],
    )
    starter.wait("kube-apiserver /readyz", lambda: api_ok(plane, "/readyz"))


def _wait_usable(plane: ControlPlane, starter: Starter, *, kcm_port: int, scheduler_port: int) -> None:
    starter.wait("kube-scheduler /healthz", lambda: https_insecure_ok(scheduler_port))
    starter.wait("kube-controller-manager /healthz", lambda: https_insecure_ok(kcm_port))
    starter.wait(
        "ServiceAccount default/default",
        lambda: api_ok(plane, "/api/v1/namespaces/default/serviceaccounts/default", expect=None),
    )
    starter.wait("a TokenRequest for default/default", lambda: _token_request_ok(plane))


def create(plane: ControlPlane, collection: str, body: Mapping[str, Any]) -> None:
    """POST ``body``; an existing object (409) is fine."""
    status, data = plane.request("POST", collection, body)
    if status not in (200, 201, 409):
        raise ClusterError(f"POST {collection} answered {status}: {data[:2000].decode(errors='replace')}")


def http_ok(url: str, needle: bytes) -> bool | None:
    address, _, rest = url.removeprefix("http://").partition("/")
    name, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(name, int(port), timeout=2)
    try:
        connection.request("GET", "/" + rest)
        response = connection.getresponse()
        return True if response.status == 200 and needle in response.read() else None
    finally:
        connection.close()


def https_insecure_ok(port: int, *, address: str = "127.0.0.1", path: str = "/healthz") -> bool | None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection(address, port, context=context, timeout=2)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return True if response.status == 200 and response.read().strip() == b"ok" else None
    finally:
        connection.close()


def api_ok(plane: ControlPlane, path: str, *, expect: bytes | None = b"ok") -> bool | None:
    status, body = plane.request("GET", path, timeout=5)
    if status != 200:
        return None
    return True if expect is None or body.strip() == expect else None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """``obj`` has condition ``kind`` with status True; a missing or null status or list is False.

    A CRD just created can answer ``"status": {"conditions": null}`` before its first condition.
    """
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def crd_established(plane: ControlPlane, name: str) -> bool | None:
    crd = plane.request_json("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return True if condition_true(crd, "Established") else None


def node_ready(plane: ControlPlane, *, port: int | None = None) -> bool | None:
    """The node is Ready, has no ``not-ready`` taint and (``port``) serves on that port."""
    node = plane.request_json("GET", f"/api/v1/nodes/{plane.node_name}")
    status = node.get("status") or {}
    ready = condition_true(node, "Ready")
    served = status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port")
    tainted = any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints", []))
    return True if ready and (port is None or served == port) and not tainted else None


def _token_request_ok(plane: ControlPlane) -> bool | None:
    status, _ = plane.request(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return True if status == 201 else None
